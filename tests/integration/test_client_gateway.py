"""The client library (tritonchat.clients) and the OpenAI-compatible gateway (tritonchat.clients.gateway)
against the real tritonserver, with the official `openai` SDK on the gateway."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.helpers import script, served_app
from tritonchat.clients import AsyncTritonChat, TritonChat
from tritonchat.clients.gateway import create_app

pytestmark = [pytest.mark.integration, pytest.mark.models("chat_scripted", "completions_scripted")]

MESSAGES = [{"role": "user", "content": "Hi"}]
# The scripted models answer "Hello world" unless a script says otherwise (harness/models/scripted_vllm).
TEXT = "Hello world"
API_KEY = "test-key"


def long_stream(count: int = 400) -> list[dict]:
    return [{"role": "user", "content": script(repeat={"text": "x", "count": count}, interval_ms=20)}]


def wait_for(path, marker: str, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker in path.read_text(errors="replace"):
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(params=["http", "grpc"])
def client(request, triton):
    url = triton.http_url if request.param == "http" else triton.grpc_url
    with TritonChat(url, protocol=request.param, chat_model="chat_scripted",
                    completions_model="completions_scripted") as client:
        client.protocol = request.param
        yield client


def test_client_returns_openai_types(client):
    completion = client.chat.completions.create(model="scripted", messages=MESSAGES)
    assert isinstance(completion, ChatCompletion)
    assert completion.choices[0].message.content == TEXT and completion.usage.completion_tokens == 2
    with client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True,
                                        stream_options={"include_usage": True}) as stream:
        chunks = list(stream)
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert chunks[-1].usage.completion_tokens == 2
    text = client.completions.create(model="scripted", prompt="Say", max_tokens=5)
    assert isinstance(text, Completion) and text.choices[0].text == TEXT
    pieces = list(client.completions.create(model="scripted", prompt="Say", max_tokens=5, stream=True))
    assert "".join(p.choices[0].text for p in pieces if p.choices) == TEXT


def test_client_errors_are_openai_exceptions_with_the_right_status(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert info.value.status_code == 404 and info.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="scripted", messages=MESSAGES, temperature=7)
    assert info.value.status_code == 400 and info.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError):  # streamed: raised by create, as with the openai SDK
        client.chat.completions.create(model="scripted", messages=[], stream=True)
    failing = [{"role": "user", "content": script(error_after=1, error_message="boom")}]
    with pytest.raises(openai.InternalServerError) as info:
        list(client.chat.completions.create(model="scripted", messages=failing, stream=True))
    assert info.value.status_code == 500 and "boom" in info.value.message


def test_closing_a_client_stream_cancels_the_request(client, triton):
    stream = client.chat.completions.create(model="scripted", messages=long_stream(), stream=True)
    chunks = iter(stream)
    first = next(chunks)
    next(chunks)
    stream.close()
    assert wait_for(triton.log_path, f"{first.id}: The request was cancelled by the client")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_async_client(triton, protocol):
    url = triton.http_url if protocol == "http" else triton.grpc_url

    async def run():
        async with AsyncTritonChat(url, protocol=protocol, chat_model="chat_scripted") as client:
            completion = await client.chat.completions.create(model="scripted", messages=MESSAGES)
            stream = await client.chat.completions.create(model="scripted", messages=MESSAGES, stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            with pytest.raises(openai.NotFoundError):
                await client.chat.completions.create(model="nope", messages=MESSAGES)
            with pytest.raises(openai.NotFoundError):  # streamed too
                await client.chat.completions.create(model="nope", messages=MESSAGES, stream=True)
            stream = await client.chat.completions.create(model="scripted", messages=long_stream(), stream=True)
            async with stream:
                async for first in stream:
                    break
            return completion, text, first

    completion, text, first = asyncio.run(run())
    assert completion.choices[0].message.content == TEXT and text == TEXT
    assert wait_for(triton.log_path, f"{first.id}: The request was cancelled by the client")


# --------------------------------------------------------------------------------------------
# The gateway, with the official openai SDK
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(triton):
    app = create_app(triton.http_url, chat_model="chat_scripted", completions_model="completions_scripted",
                     api_key=API_KEY)
    with served_app(app) as url:
        yield url


@pytest.fixture
def sdk(gateway):
    with openai.OpenAI(base_url=gateway + "/v1", api_key=API_KEY, max_retries=0) as sdk:
        yield sdk


def test_gateway_serves_the_openai_sdk(sdk):
    completion = sdk.chat.completions.create(model="scripted", messages=MESSAGES)
    assert completion.choices[0].message.content == TEXT
    stream = sdk.chat.completions.create(model="scripted", messages=MESSAGES, stream=True,
                                         stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert chunks[-1].usage.total_tokens == chunks[-1].usage.prompt_tokens + 2
    assert sdk.completions.create(model="scripted", prompt="Say", max_tokens=5).choices[0].text == TEXT
    assert [m.id for m in sdk.models.list()] == ["scripted"]


def test_gateway_errors_raise_the_sdks_exceptions(sdk, gateway):
    with pytest.raises(openai.NotFoundError) as info:
        sdk.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert info.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model="scripted", messages=MESSAGES, stream=True, top_p=3)
    assert info.value.status_code == 400 and info.value.body["param"] == "top_p"
    failing = [{"role": "user", "content": script(error_after=1, error_message="boom")}]
    with pytest.raises(openai.APIError, match="boom"):  # after a chunk: an error event in the stream
        list(sdk.chat.completions.create(model="scripted", messages=failing, stream=True))
    with openai.OpenAI(base_url=gateway + "/v1", api_key="wrong", max_retries=0) as stranger:
        with pytest.raises(openai.AuthenticationError):
            stranger.chat.completions.create(model="scripted", messages=MESSAGES)


def test_gateway_sse_layout(gateway):
    import requests

    body = {"model": "scripted", "messages": MESSAGES, "stream": True}
    with requests.post(gateway + "/v1/chat/completions", json=body, stream=True, timeout=30,
                       headers={"Authorization": f"Bearer {API_KEY}"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = r.content.decode()
    events = raw.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(event.startswith("data: {") for event in events[:-2])
    assert requests.get(gateway + "/health", timeout=10).status_code == 200


def test_gateway_disconnect_cancels_the_triton_request(sdk, triton):
    stream = sdk.chat.completions.create(model="scripted", messages=long_stream(), stream=True)
    chunks = iter(stream)
    first = next(chunks)
    next(chunks)
    stream.close()
    assert wait_for(triton.log_path, f"{first.id}: The request was cancelled by the client")


def test_langchain_chat_openai_through_the_gateway(gateway):
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(model="scripted", base_url=gateway + "/v1", api_key=API_KEY, max_retries=0)
    assert model.invoke("Hi").content == TEXT
    assert "".join(chunk.content for chunk in model.stream("Hi")) == TEXT


def test_gateway_retrieves_models_and_answers_health_probes(sdk, gateway):
    import requests

    assert sdk.models.retrieve("scripted").id == "scripted"
    with pytest.raises(openai.NotFoundError) as info:
        sdk.models.retrieve("gpt-4o")
    assert info.value.body["code"] == "model_not_found"
    for path in ("/health", "/health/ready", "/health/live"):  # open: the health group has no key of its own
        assert requests.get(gateway + path, timeout=10).status_code == 200, path
