"""Images in chat requests: `image_url` parts parsed and checked (data: URLs, allowed http URLs,
limits), rendered into processor-style chat templates, and sent in the vLLM backend's `image`
input; refused where the model or the generation model takes none."""

from __future__ import annotations

import base64
import json
import time
from dataclasses import replace

import pytest

from tests.vision import QWEN2_VL_TEMPLATE, data_url, image_bytes, image_part, serve_images, vision_tokenizer
from tritonchat.errors import BadRequestError
from tritonchat.formats import FORMATS, FormatOptions, GenerationRequest
from tritonchat.images import ImagePolicy, load_image, load_images, model_has_vision
from tritonchat.protocol import parse_chat_request
from tritonchat.service import ChatService
from tritonchat.settings import ConfigError, Settings
from tritonchat.template import PromptRenderer, load_tokenizer

PNG = image_bytes("PNG")


def chat(*parts, **fields) -> str:
    return json.dumps({"messages": [{"role": "user", "content": list(parts)}], **fields})


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def refused(call, *fragments: str, param: str = "messages") -> BadRequestError:
    with pytest.raises(BadRequestError) as info:
        call()
    assert info.value.param == param, info.value
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    return info.value


# ---- parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize("detail", [None, "auto", "low", "high"])
def test_image_parts_parse_with_any_detail(detail):
    fields = {"detail": detail} if detail else {}
    request = parse_chat_request(chat(text("What is it?"), image_part(data_url(PNG), **fields)))
    part = request.messages[0].content[1]
    assert part.image_url.url.startswith("data:image/png;base64,") and part.image_url.detail == detail


@pytest.mark.parametrize(
    ("part", "param", "fragment"),
    [
        (image_part("data:,", detail="medium"), "messages[0].content[0].image_url.detail", "'medium'"),
        ({"type": "image_url", "image_url": {"url": 5}}, "messages[0].content[0].image_url.url", "string"),
        ({"type": "image_url"}, "messages[0].content[0].image_url", "required"),
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}, "messages[0].content[0]",
         "'input_audio'"),
        ({"type": "file", "file": {"file_id": "f"}}, "messages[0].content[0]", "'file'"),
    ],
)
def test_bad_and_unsupported_parts_are_400s_naming_them(part, param, fragment):
    refused(lambda: parse_chat_request(chat(part)), fragment, param=param)


def test_images_only_in_user_messages():
    body = json.dumps({"messages": [{"role": "system", "content": [image_part(data_url(PNG))]},
                                    {"role": "user", "content": "Hi"}]})
    refused(lambda: parse_chat_request(body), param="messages[0].content[0].type")


# ---- data: URLs ------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"),
                                            ("WEBP", "image/webp")])
def test_data_urls_of_each_format_are_read(kind, mime):
    data = image_bytes(kind, size=(5, 7))
    image = load_image(data_url(data, mime), ImagePolicy())
    assert (image.data, image.format, image.width, image.height) == (data, kind, 5, 7)
    assert base64.b64decode(image.base64()) == data


def test_base64_with_line_breaks_is_read():
    encoded = base64.encodebytes(PNG).decode()  # MIME style: a newline every 76 characters
    assert load_image(f"data:image/png;base64,{encoded}", ImagePolicy()).data == PNG


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("data:image/png;base64,***not base64***", "not valid base64"),
        ("data:image/png;base64,iVBORw0KGgo=x", "not valid base64"),
        (data_url(b"just some text, not an image"), "not a readable image"),
        (data_url(PNG[: len(PNG) // 2]), "not a readable image"),
        (data_url(PNG, "image/bmp"), "PNG, JPEG, GIF or WebP"),
        (data_url(PNG, "text/plain"), "'text/plain'"),
        ("data:image/png," + PNG.hex(), "base64-encoded"),
        ("data:image/png;base64,", "no data"),
        ("data:nothing", "data:image/png;base64,<data>"),
        ("file:///etc/passwd", "data: URL"),
        ("just-a-name.png", "data: URL"),
    ],
)
def test_bad_data_urls_are_400s_naming_messages(url, fragment):
    error = refused(lambda: load_image(url, ImagePolicy(), "messages[0].content[1]"), fragment)
    assert "messages[0].content[1]" in str(error)


def test_a_bmp_file_in_a_png_data_url_is_refused():
    refused(lambda: load_image(data_url(image_bytes("BMP")), ImagePolicy()), "this one is BMP")


def test_too_large_images_are_refused_before_and_after_decoding():
    policy = ImagePolicy(max_bytes=len(PNG) - 1)
    refused(lambda: load_image(data_url(PNG), policy), "max_image_bytes", f"at most {len(PNG) - 1}")
    big = ImagePolicy(max_bytes=1000)
    refused(lambda: load_image(data_url(b"x" * 5000), big), "more than", "max_image_bytes")
    assert load_image(data_url(PNG), ImagePolicy(max_bytes=len(PNG))).data == PNG


def test_too_many_images_are_refused():
    request = parse_chat_request(chat(*[image_part(data_url(PNG))] * 3))
    assert len(load_images(request, ImagePolicy(max_images=3))) == 3
    refused(lambda: load_images(request, ImagePolicy(max_images=2)), "3 images", "max_images")


def test_images_come_in_prompt_order():
    red, blue = image_bytes(color=(255, 0, 0)), image_bytes(color=(0, 0, 255))
    body = json.dumps({"messages": [
        {"role": "user", "content": [image_part(data_url(red)), text("and")]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [text("then"), image_part(data_url(blue))]},
    ]})
    assert [image.data for image in load_images(parse_chat_request(body), ImagePolicy())] == [red, blue]


# ---- http(s) URLs ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def image_server():
    with serve_images() as url:
        yield url


def test_http_urls_need_an_allowlist(image_server):
    refused(lambda: load_image(f"{image_server}/images/a.png", ImagePolicy()), "image_url_allowlist is empty",
            "data: URL")


def test_allowed_urls_are_fetched_and_others_refused(image_server):
    policy = ImagePolicy(allowlist=(f"{image_server}/images/",))
    image = load_image(f"{image_server}/images/a.png", policy)
    assert image.data == PNG and image.format == "PNG"
    refused(lambda: load_image(f"{image_server}/private/a.png", policy), "not under an allowed prefix")
    refused(lambda: load_image(f"{image_server}/images/page.html", policy), "not a readable image")
    refused(lambda: load_image(f"{image_server}/images/missing/a.png", policy), "HTTP 404")


def test_a_prefix_matches_only_at_a_boundary():
    policy = ImagePolicy(allowlist=("https://img.example.com", "https://cdn.example.org/pics/"))
    assert policy.allows("https://img.example.com/a.png") and policy.allows("https://IMG.example.com/a.png")
    assert policy.allows("https://cdn.example.org/pics/a.png")
    assert not policy.allows("https://img.example.com.evil.net/a.png")
    assert not policy.allows("https://img.example.comx/a.png")
    assert not policy.allows("https://cdn.example.org/other/a.png")


def test_fetching_is_bounded_in_time_and_size(image_server):
    slow = ImagePolicy(allowlist=(image_server + "/",), fetch_timeout_s=0.5)
    started = time.monotonic()
    refused(lambda: load_image(f"{image_server}/slow/a.png", slow), "longer than 0.5 s", "image_fetch_timeout_s")
    assert time.monotonic() - started < 2
    small = ImagePolicy(allowlist=(image_server + "/",), max_bytes=10)
    refused(lambda: load_image(f"{image_server}/a.png", small), "max_image_bytes")


def test_redirects_stay_inside_the_allowlist(image_server):
    policy = ImagePolicy(allowlist=(f"{image_server}/redirect/",))
    refused(lambda: load_image(f"{image_server}/redirect/a.png", policy), "redirects to", "image_url_allowlist")


def test_unreachable_hosts_are_400s():
    policy = ImagePolicy(allowlist=("http://127.0.0.1:9/",), fetch_timeout_s=2)
    refused(lambda: load_image("http://127.0.0.1:9/a.png", policy), "fetching the image failed")


# ---- chat templates ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def llava(tiny_model, tmp_path_factory):
    return load_tokenizer(str(vision_tokenizer(tiny_model, tmp_path_factory.mktemp("llava") / "tok")))


@pytest.fixture(scope="module")
def qwen2_vl(tiny_model, tmp_path_factory):
    path = vision_tokenizer(tiny_model, tmp_path_factory.mktemp("qwen2vl") / "tok", QWEN2_VL_TEMPLATE)
    return load_tokenizer(str(path))


def test_a_llava_style_template_gets_image_parts_in_place(llava):
    renderer = PromptRenderer(llava)
    assert renderer.content_format == "openai"
    request = parse_chat_request(chat(text("Compare "), image_part(data_url(PNG)), text("with"),
                                      image_part(data_url(PNG), detail="low")))
    assert renderer.messages(request)[0]["content"] == [
        {"type": "text", "text": "Compare "}, {"type": "image"}, {"type": "text", "text": "with"}, {"type": "image"}]
    assert renderer.render(request).text == "USER: Compare <image>\nwith<image>\n\nASSISTANT:"


def test_a_qwen2_vl_style_template_gets_its_placeholders(qwen2_vl):
    request = parse_chat_request(chat(image_part(data_url(PNG)), text("What is this?")))
    prompt = PromptRenderer(qwen2_vl).render(request).text
    assert prompt == ("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is this?<|im_end|>\n"
                      "<|im_start|>assistant\n")


def test_text_only_requests_render_as_before(llava):
    request = parse_chat_request(json.dumps({"messages": [{"role": "user", "content": "Hi"}]}))
    assert PromptRenderer(llava).render(request).text == "USER: Hi\nASSISTANT:"


def test_templates_taking_strings_have_no_place_for_images(tokenizer):
    renderer = PromptRenderer(tokenizer, "string")
    request = parse_chat_request(chat(text("Hi"), image_part(data_url(PNG))))
    refused(lambda: renderer.render(request), "takes message content as a string", "no place for images")


# ---- request formats -------------------------------------------------------------------


def generation(**fields) -> GenerationRequest:
    return GenerationRequest(prompt="USER: <image>\n", prompt_tokens=3, max_tokens=4, stream=True, **fields)


def test_the_vllm_format_sends_base64_files_in_the_image_input():
    fmt = FORMATS["vllm"](FormatOptions(target_model="llava"))
    other = image_bytes("JPEG")
    inputs = fmt.inputs(generation(images=(PNG, other)))
    assert inputs["image"].dtype == object and inputs["image"].shape == (2,)
    assert [base64.b64decode(v) for v in inputs["image"]] == [PNG, other]
    assert not inputs["image"][0].startswith(b"data:")
    assert "image" not in fmt.inputs(generation())


def test_the_vllm_format_refuses_images_for_a_target_without_the_input():
    inputs = frozenset({"text_input", "stream", "sampling_parameters", "exclude_input_in_output",
                        "return_finish_reason", "return_num_input_tokens", "return_num_output_tokens"})
    fmt = FORMATS["vllm"](FormatOptions(target_model="old", target_inputs=inputs))
    assert "takes no images" in fmt.image_refusal() and "'image' input" in fmt.image_refusal()
    refused(lambda: fmt.check(generation(images=(PNG,))), "takes no images")
    fmt.check(generation())
    assert FORMATS["vllm"](FormatOptions(target_inputs=inputs | {"image"})).image_refusal() is None


@pytest.mark.parametrize("name", ["trtllm", "tensorrt_llm", "llmapi"])
def test_tensorrt_llm_formats_refuse_images(name, tokenizer):
    fmt = FORMATS[name](FormatOptions(target_model="x", tokenizer=tokenizer))
    reason = fmt.image_refusal()
    assert reason and "request_format vllm" in reason
    refused(lambda: fmt.check(generation(images=(PNG,))), "Images are not supported here")


# ---- the service -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def vision_dir(tiny_model, tmp_path_factory):
    return vision_tokenizer(tiny_model, tmp_path_factory.mktemp("vision") / "tok")


def service(tokenizer_dir, **parameters) -> ChatService:
    settings = Settings.from_parameters({"tokenizer": str(tokenizer_dir), "served_model_name": "m", **parameters}, None)
    return ChatService(settings)


def test_an_image_request_is_prepared_with_the_image_input(vision_dir):
    other = image_bytes("GIF")
    prepared = service(vision_dir).prepare(chat(text("Two:"), image_part(data_url(PNG)),
                                                image_part(data_url(other, "image/gif")), max_tokens=3))
    assert prepared.prompt.text.count("<image>") == 2
    assert [base64.b64decode(v) for v in prepared.calls[0].inputs["image"]] == [PNG, other]
    assert prepared.generations[0].images == (PNG, other)


def test_a_text_only_model_refuses_images_unless_told(tiny_model):
    assert model_has_vision(tiny_model) is False
    body = chat(text("Hi"), image_part(data_url(PNG)), max_tokens=3)
    refused(lambda: service(tiny_model).prepare(body), "text-only", "image_inputs")
    # Told it takes images, its chat template decides: the tiny model's takes text parts only.
    refused(lambda: service(tiny_model, image_inputs="true").prepare(body), "chat template failed", "type: image")
    refused(lambda: service(tiny_model, image_inputs="true", chat_template_content_format="string").prepare(body),
            "no place for images")
    # Text requests are not affected.
    service(tiny_model).prepare(chat(text("Hi"), max_tokens=3))


def test_image_inputs_false_refuses_images_on_a_vision_model(vision_dir):
    refused(lambda: service(vision_dir, image_inputs="false").prepare(chat(image_part(data_url(PNG)))),
            "image_inputs false")


def test_without_config_json_images_are_left_to_the_generation_model(vision_dir, tmp_path):
    assert model_has_vision(tmp_path) is None


def test_service_limits_come_from_settings(vision_dir, tmp_path):
    svc = service(vision_dir, max_images="1", max_image_bytes=str(len(PNG) - 1))
    refused(lambda: svc.prepare(chat(*[image_part(data_url(PNG))] * 2)), "2 images", "max_images")
    refused(lambda: svc.prepare(chat(image_part(data_url(PNG)))), "max_image_bytes")
    refused(lambda: svc.prepare(chat(image_part("https://example.com/a.png"))), "image_url_allowlist is empty")
    allowing = service(vision_dir, image_url_allowlist="https://images.example.com/")
    refused(lambda: allowing.prepare(chat(image_part("https://example.com/a.png"))), "not under an allowed prefix")


def test_the_trtllm_formats_refuse_images_in_the_service(vision_dir):
    svc = service(vision_dir, request_format="trtllm", max_model_len="2048")
    refused(lambda: svc.prepare(chat(image_part(data_url(PNG)))), "TensorRT-LLM ensemble", "request_format vllm")


def test_a_target_without_the_image_input_refuses_in_the_service(vision_dir):
    svc = service(vision_dir)
    svc.format.options = replace(svc.format.options, target_inputs=frozenset(
        {"text_input", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens",
         "return_num_output_tokens"}))
    refused(lambda: svc.prepare(chat(image_part(data_url(PNG)))), "takes no images")


def test_image_parts_do_not_count_as_content_characters(vision_dir):
    svc = service(vision_dir, max_content_chars="5")
    svc.prepare(chat(text("Hi"), image_part(data_url(PNG)), max_tokens=2))


@pytest.mark.parametrize("value", ["ftp://x/", "images.example.com", "https://"])
def test_the_allowlist_takes_http_prefixes_only(value):
    with pytest.raises(ConfigError, match="image_url_allowlist"):
        Settings.from_parameters({"tokenizer": "t", "image_url_allowlist": value}, None)
