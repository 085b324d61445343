"""Images through the real server: `image_url` parts rendered by a LLaVA-style template and sent
in the vLLM backend's `image` input to the scripted stand-in (which decodes them as the backend
does and reports them), the limits and the allow-list, and the targets that take no images."""

from __future__ import annotations

import base64
import io
import json
import os
import time

import pytest
import requests

from tests.helpers import ChatClient, script
from tests.vision import IMAGE_SERVER_PORT, IMAGE_URL_PREFIX, data_url, image_bytes, image_part, serve_images

pytestmark = [
    pytest.mark.integration,
    pytest.mark.models(
        "chat_vision", "chat_vision_defaults", "chat_vision_no_image", "chat_trtllm", "chat_tensorrt_llm",
        "chat_llmapi", "openai_chat", "chat_scripted",
    ),
]

PNG = image_bytes("PNG", size=(4, 3))


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def request(*parts, **fields) -> dict:
    return {"messages": [{"role": "user", "content": list(parts)}], "max_tokens": 8, **fields}


def echo(*images, **fields) -> dict:
    """A request whose answer is the stand-in's description of what it received."""
    return request(text(script(echo_request=True)), *images, **fields)


@pytest.fixture(scope="module")
def vision(triton) -> ChatClient:
    return ChatClient(triton.http_url, "chat_vision")


def refused(status: int, body: dict, *fragments: str, param: str | None = "messages") -> str:
    assert status == 400, body
    error = body["error"]
    assert error["param"] == param, error
    for fragment in fragments:
        assert fragment in error["message"], error["message"]
    return error["message"]


def test_a_data_url_image_reaches_the_generation_model(vision):
    status, body = vision.create(echo(image_part(data_url(PNG), detail="high")))
    assert status == 200, body
    received = json.loads(body["choices"][0]["message"]["content"])
    assert received["images"] == [{"format": "PNG", "width": 4, "height": 3, "mode": "RGB"}]
    assert received["prompt"].count("<image>") == 1 and received["prompt"].startswith("USER: SCRIPT:")
    assert received["inputs"]["text_input"] == [received["prompt"]]


def test_several_images_of_several_formats_arrive_in_order_while_streaming(vision):
    images = [image_bytes("PNG", (2, 2)), image_bytes("JPEG", (8, 6)), image_bytes("WEBP", (5, 5))]
    parts = [image_part(data_url(images[0])), text("then"), image_part(data_url(images[1], "image/jpeg")),
             image_part(data_url(images[2], "image/webp"))]
    result = vision.stream(echo(*parts, stream=True))
    assert result.status == 200 and result.error is None, result
    received = json.loads(result.content)
    assert [(i["format"], i["width"], i["height"]) for i in received["images"]] == [
        ("PNG", 2, 2), ("JPEG", 8, 6), ("WEBP", 5, 5)]
    assert received["prompt"].count("<image>") == 3


def test_bad_base64_is_a_400(vision):
    refused(*vision.create(request(image_part("data:image/png;base64,@@not-base64@@"))), "not valid base64",
            "messages[0].content[0]")


def test_data_that_is_no_image_is_a_400(vision):
    refused(*vision.create(request(text("look"), image_part(data_url(b"GIF89a but not really")))),
            "not a readable image", "messages[0].content[1]")


def test_too_large_and_too_many_images_are_400s(vision):
    from PIL import Image  # noqa: PLC0415

    buffer = io.BytesIO()
    Image.frombytes("RGB", (160, 160), os.urandom(160 * 160 * 3)).save(buffer, format="PNG")  # noise: no compression
    big = buffer.getvalue()
    assert len(big) > 65536  # chat_vision's max_image_bytes
    refused(*vision.create(request(image_part(data_url(big)))), "max_image_bytes", "at most 65536")
    refused(*vision.create(request(*[image_part(data_url(PNG))] * 4)), "4 images", "max_images")


def test_http_urls_are_refused_without_an_allowlist(triton):
    client = ChatClient(triton.http_url, "chat_vision_defaults")
    refused(*client.create(request(image_part(IMAGE_URL_PREFIX + "a.png"))), "image_url_allowlist is empty")
    # The same model takes data: URLs.
    status, body = client.create(echo(image_part(data_url(PNG))))
    assert status == 200 and json.loads(body["choices"][0]["message"]["content"])["images"], body


@pytest.fixture(scope="module")
def image_server():
    with serve_images(IMAGE_SERVER_PORT) as url:
        yield url


def test_an_allowed_url_is_fetched(vision, image_server):
    status, body = vision.create(echo(image_part(IMAGE_URL_PREFIX + "photo.jpg")))
    assert status == 200, body
    assert json.loads(body["choices"][0]["message"]["content"])["images"] == [
        {"format": "JPEG", "width": 7, "height": 9, "mode": "RGB"}]


def test_a_url_outside_the_allowlist_and_a_slow_one_are_400s(vision, image_server):
    outside = f"http://127.0.0.1:{IMAGE_SERVER_PORT}/private/photo.jpg"
    refused(*vision.create(request(image_part(outside))), "not under an allowed prefix")
    started = time.monotonic()
    refused(*vision.create(request(image_part(IMAGE_URL_PREFIX + "slow/photo.jpg"))), "longer than 1 s",
            "image_fetch_timeout_s")
    assert time.monotonic() - started < 3


def test_a_target_without_the_image_input_refuses(triton):
    client = ChatClient(triton.http_url, "chat_vision_no_image")
    refused(*client.create(request(image_part(data_url(PNG)))), "takes no images",
            "'scripted_vllm_no_image' has no 'image' input")
    status, body = client.create(request(text(script(chunks=["fine"]))))
    assert status == 200 and body["choices"][0]["message"]["content"] == "fine"


@pytest.mark.parametrize(("model", "fragment"), [("chat_trtllm", "TensorRT-LLM ensemble"),
                                                 ("chat_tensorrt_llm", "tensorrt_llm model takes token ids"),
                                                 ("chat_llmapi", "LLM API model")])
def test_tensorrt_llm_routes_refuse_images(triton, model, fragment):
    client = ChatClient(triton.http_url, model)
    refused(*client.create(request(image_part(data_url(PNG)))), fragment, "request_format vllm")


@pytest.mark.parametrize("model", ["openai_chat", "chat_scripted", "openai_chat_inprocess"])
def test_text_only_models_refuse_images_before_generation(triton, model):
    triton.load(model)
    client = ChatClient(triton.http_url, model)
    refused(*client.create(request(text("What is this?"), image_part(data_url(PNG)))), "text-only",
            "image_inputs true")


def test_other_part_types_stay_refused(vision):
    audio = {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"RIFF").decode(), "format": "wav"}}
    refused(*vision.create(request(audio)), "'input_audio'", param="messages[0].content[0]")
    refused(*vision.create(request({"type": "file", "file": {"file_id": "f"}})), "'file'",
            param="messages[0].content[0]")


# ---- the generation models' own `image` input -------------------------------------------


def generate(triton, model: str, prompt: str, images: list[str]) -> requests.Response:
    body = {"text_input": prompt, "image": images, "stream": False, "exclude_input_in_output": True,
            "sampling_parameters": json.dumps({"max_tokens": 2})}
    return requests.post(f"http://{triton.http_url}/v2/models/{model}/generate", json=body, timeout=120)


def test_the_stand_in_decodes_and_counts_as_the_backend_and_vllm_do(triton):
    encoded = base64.b64encode(PNG).decode()
    ok = generate(triton, "scripted_vllm", "USER: <image>\n" + script(echo_request=True), [encoded])
    assert ok.status_code == 200, ok.text
    assert json.loads(ok.json()["text_output"])["images"][0]["format"] == "PNG"
    mismatch = generate(triton, "scripted_vllm", "USER: <image>\n<image>\n", [encoded])
    assert "Expected there to be 1 prompt updates corresponding to 1 image items" in mismatch.json()["error"]
    broken = generate(triton, "scripted_vllm", "USER: <image>\n", [base64.b64encode(b"no image").decode()])
    assert broken.json()["error"].startswith("Error generating stream: cannot identify image file")


def test_the_local_vllm_backend_decodes_images_and_vllm_refuses_them_for_a_text_model(triton):
    encoded = base64.b64encode(PNG).decode()
    refused_by_vllm = generate(triton, "vllm_model", "Describe", [encoded])
    assert refused_by_vllm.status_code == 400 and "Error generating stream" in refused_by_vllm.json()["error"]
    broken = generate(triton, "vllm_model", "Describe", [base64.b64encode(b"no image").decode()])
    assert broken.json()["error"].startswith("Error generating stream: cannot identify image file")
