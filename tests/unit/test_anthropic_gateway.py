"""The gateway's Anthropic routes without a server: a fake wire answering with Anthropic payloads,
through FastAPI's TestClient and through the official `anthropic` SDK over an ASGI transport
(server-sent events with their `event:` lines, Anthropic's errors and statuses, `x-api-key`)."""

from __future__ import annotations

import asyncio
import json

import anthropic
import pytest
from fastapi.testclient import TestClient

from tests.unit.test_gateway import triton_transport
from tritonchat.clients import api_error
from tritonchat.clients.anthropic import counting_body, event_name, failure
from tritonchat.clients.gateway import create_app, parser
from tritonchat.clients.wires import httpx
from tritonchat.errors import InternalError, UnavailableError
from tritonchat.protocol.anthropic import anthropic_error

KEY = "sk-ant-key-1234"
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "tiny",
           "content": [{"type": "text", "text": "Hello world"}], "stop_reason": "end_turn", "stop_sequence": None,
           "usage": {"input_tokens": 7, "output_tokens": 2}}
EVENTS = [
    {"type": "message_start", "message": {**MESSAGE, "content": [], "stop_reason": None,
                                          "usage": {"input_tokens": 7, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " world"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"input_tokens": 7, "output_tokens": 2}},
    {"type": "message_stop"},
]


def compact(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"))


class FakeWire:
    """The model's answers: `refuse` (an error before any event), `fail` (after the first),
    `unreachable`, `triton` (an error Triton itself answers, not the model)."""

    def __init__(self):
        self.calls: list[tuple[str, str, bool]] = []

    async def payloads(self, model: str, body: str, stream: bool):
        self.calls.append((model, body, stream))
        request = json.loads(body) if body.startswith("{") else {}
        if request.get("unreachable"):
            raise httpx.ConnectError("connection refused")
        if request.get("triton"):
            raise api_error("Request for unknown model: 'anthropic_messages' is not found", "fake")
        if request.get("refuse"):
            error = {"404": "not_found_error"}.get(request["refuse"], "overloaded_error")
            shaped = anthropic_error(UnavailableError("busy")) if error == "overloaded_error" else None
            raise api_error(shaped.to_json() if shaped else json.dumps(
                {"type": "error", "error": {"type": error, "message": "no such model"}}), "fake")
        if request.get("endpoint") == "count_tokens":
            yield '{"input_tokens": 12}'
            return
        if not stream:
            yield compact(MESSAGE)
            return
        for index, event in enumerate(EVENTS):
            if request.get("fail") and index == 2:
                raise api_error(anthropic_error(InternalError("boom")).to_json(), "fake")
            yield compact(event)

    async def close(self) -> None:
        pass


@pytest.fixture
def wire():
    return FakeWire()


@pytest.fixture
def client(wire):
    with TestClient(create_app(wire=wire, transport=triton_transport(), api_key=KEY)) as client:
        yield client


def post(client, body: dict, path: str = "/v1/messages", **headers):
    return client.post(path, content=json.dumps(body), headers={"x-api-key": KEY, **headers})


def test_a_message_is_forwarded_unchanged(client, wire):
    body = '{"model": "tiny", "max_tokens": 5, "messages": []}'
    response = client.post("/v1/messages", content=body, headers={"x-api-key": KEY})
    assert response.status_code == 200 and response.json() == MESSAGE
    assert wire.calls == [("anthropic_messages", body, False)]


def test_a_stream_is_anthropics_server_sent_events(client):
    response = post(client, {"model": "tiny", "stream": True})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert response.text == "".join(f"event: {e['type']}\ndata: {compact(e)}\n\n" for e in EVENTS)


def test_count_tokens_is_marked_for_the_model(client, wire):
    response = post(client, {"model": "tiny", "messages": []}, "/v1/messages/count_tokens")
    assert response.json() == {"input_tokens": 12}
    [(model, body, stream)] = wire.calls
    assert (model, stream) == ("anthropic_messages", False) and json.loads(body)["endpoint"] == "count_tokens"
    assert counting_body(b"[1]") == "[1]" and counting_body(b"{bad") == "{bad"


def test_errors_have_anthropics_shape_and_status(client):
    for stream in (False, True):
        response = post(client, {"refuse": "404", "stream": stream})
        assert response.status_code == 404
        assert response.json() == {"type": "error", "error": {"type": "not_found_error", "message": "no such model"}}
        response = post(client, {"refuse": "529", "stream": stream})
        assert response.status_code == 529 and response.json()["error"]["type"] == "overloaded_error"
        response = post(client, {"unreachable": True, "stream": stream})
        assert response.status_code == 529 and "Triton cannot be reached" in response.json()["error"]["message"]
    response = post(client, {"triton": True})  # Triton's own error (wrapped as a 500 by the wire)
    assert response.status_code == 500 and response.json()["error"]["type"] == "api_error"
    events = post(client, {"fail": True, "stream": True}).text.split("\n\n")
    assert events[2] == 'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"boom"}}'
    assert events[3:] == [""]


def test_keys_and_body_cap_answer_in_the_shape_of_the_route(wire):
    with TestClient(create_app(wire=wire, transport=triton_transport(), api_key=KEY, max_body_bytes=100)) as client:
        refused = client.post("/v1/messages", content="{}")
        assert refused.status_code == 401
        assert refused.json() == {"type": "error", "error": {"type": "authentication_error", "message": (
            "No API key provided: send it as `Authorization: Bearer KEY` or `x-api-key: KEY`.")}}
        assert client.post("/v1/messages", content="{}", headers={"x-api-key": "wrong"}).json()["error"] == {
            "type": "authentication_error", "message": "Incorrect API key provided."}
        assert client.post("/v1/messages", content="{}", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
        chat = client.post("/v1/chat/completions", content="{}", headers={"x-api-key": "wrong"})
        assert chat.status_code == 401 and chat.json()["error"]["code"] == "invalid_api_key"  # OpenAI's shape there
        assert client.post("/v1/chat/completions", content="{}", headers={"x-api-key": KEY}).status_code == 200
        big = client.post("/v1/messages/count_tokens", content="x" * 101, headers={"x-api-key": KEY})
        assert big.status_code == 413 and big.json()["error"]["type"] == "request_too_large"


def test_the_anthropic_sdk_through_the_gateway(wire):
    async def run():
        app = create_app(wire=wire, transport=triton_transport(), api_key=KEY)
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
        async with anthropic.AsyncAnthropic(base_url="http://gateway", api_key=KEY, http_client=http,
                                            max_retries=0) as sdk:
            message = await sdk.messages.create(model="tiny", max_tokens=5, messages=[{"role": "user", "content": "Hi"}])
            async with sdk.messages.stream(model="tiny", max_tokens=5,
                                           messages=[{"role": "user", "content": "Hi"}]) as stream:
                text = "".join([piece async for piece in stream.text_stream])
                final = await stream.get_final_message()
            count = await sdk.messages.count_tokens(model="tiny", messages=[{"role": "user", "content": "Hi"}])
            with pytest.raises(anthropic.NotFoundError) as missing:
                await sdk.messages.create(model="tiny", max_tokens=5, messages=[], extra_body={"refuse": "404"})
            with pytest.raises(anthropic.InternalServerError) as overloaded:
                await sdk.messages.create(model="tiny", max_tokens=5, messages=[], extra_body={"refuse": "529"})
            with pytest.raises(anthropic.APIStatusError) as failed:
                async with sdk.messages.stream(model="tiny", max_tokens=5, messages=[],
                                               extra_body={"fail": True}) as broken:
                    await broken.get_final_message()
        return message, text, final, count, missing.value, overloaded.value, failed.value

    message, text, final, count, missing, overloaded, failed = asyncio.run(run())
    assert message.content[0].text == "Hello world" == text and final.model_dump() == message.model_dump()
    assert count.input_tokens == 12
    assert missing.status_code == 404 and missing.body["error"]["type"] == "not_found_error"
    assert overloaded.status_code == 529 and isinstance(overloaded, anthropic.OverloadedError)
    assert "boom" in str(failed) and failed.body["error"]["type"] == "api_error"


def test_event_names_and_failures():
    assert event_name('{"type":"message_stop"}') == "message_stop"
    assert event_name('{"type": "ping"}') == "ping" and event_name("nonsense") == "error"
    status, body = failure(httpx.ConnectError("refused"))
    assert status == 529 and body["error"]["type"] == "overloaded_error"
    assert parser().parse_args(["--messages-model", "mine"]).messages_model == "mine"
    assert parser().parse_args([]).messages_model == "anthropic_messages"
