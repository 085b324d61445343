"""The OpenAI-compatible gateway without a server: FastAPI's TestClient (and the `openai` SDK over
an ASGI transport) against a fake wire and a fake Triton HTTP endpoint for configs and readiness."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging

import openai
import pytest
from fastapi.testclient import TestClient

from tritonchat.clients import api_error, wires
from tritonchat.clients.access import BodyCap, group_of, resolve_keys
from tritonchat.clients.gateway import MAX_BODY_BYTES, PROTOCOLS, create_app, group_keys, main, parser
from tritonchat.clients.wires import httpx
from tritonchat.errors import InternalError, NotFoundError
from tritonchat.settings import Settings

CHUNKS = [{"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": word}}]}
          for word in ("Hello", " world")]
COMPLETION = {"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": {"content": "Hello world"}}]}
KEY = "sk-the-single-key-1234"


class FakeWire:
    """An `AsyncWire`: the request body says what to answer (`refuse`: an error before any chunk,
    `fail`: an error after the first one, `unreachable`: a connection error)."""

    def __init__(self):
        self.calls: list[tuple[str, str, bool]] = []
        self.closed = 0

    async def payloads(self, model: str, body: str, stream: bool):
        self.calls.append((model, body, stream))
        request = json.loads(body) if body.startswith("{") else {}
        try:
            if request.get("unreachable"):
                raise httpx.ConnectError("connection refused")
            if request.get("refuse"):
                raise api_error(NotFoundError(f"The model '{request['model']}' does not exist.").to_json(), "fake")
            if not stream:
                yield json.dumps(COMPLETION)
                return
            for index, chunk in enumerate(CHUNKS):
                if request.get("fail") and index == 1:
                    raise api_error(InternalError("boom").to_json(), "fake")
                yield json.dumps(chunk)
        finally:
            self.closed += 1

    async def close(self) -> None:
        pass


def triton_transport(served: str | None = "tiny-chat", ready: bool = True, down: bool = False):
    """Triton's HTTP endpoint for model configs and readiness."""

    def handler(request):
        if down:
            raise httpx.ConnectError("connection refused")
        path = request.url.path
        if path.endswith("/ready"):
            return httpx.Response(200 if ready else 400)
        if path.endswith("/config"):
            parameters = {"served_model_name": {"string_value": served}} if served else {}
            return httpx.Response(200, json={"name": path.split("/")[3], "parameters": parameters})
        return httpx.Response(404)

    return httpx.MockTransport(handler)


@pytest.fixture
def fake_wire():
    return FakeWire()


def gateway(wire, **options) -> TestClient:
    transport = options.pop("transport", None) or triton_transport()
    return TestClient(create_app(wire=wire, transport=transport, **options))


@pytest.fixture
def client(fake_wire):
    with gateway(fake_wire) as client:
        yield client


def ask(client, body: dict, path: str = "/v1/chat/completions", **headers):
    return client.post(path, content=json.dumps(body), headers=headers)


# ------------------------------------------------------------------------------------------
# Forwarding (kept from before the move)
# ------------------------------------------------------------------------------------------


def test_a_body_is_forwarded_unchanged_and_the_payload_comes_back(client, fake_wire):
    body = '{"model": "tiny-chat", "messages": [], "top_k": 3}'
    response = client.post("/v1/chat/completions", content=body)
    assert response.status_code == 200 and response.json() == COMPLETION
    assert response.headers["content-type"] == "application/json"
    client.post("/v1/completions", content='{"prompt": "Say"}')
    assert fake_wire.calls == [("openai_chat", body, False), ("openai_completions", '{"prompt": "Say"}', False)]


def test_streaming_writes_openai_server_sent_events(client, fake_wire):
    response = ask(client, {"model": "m", "stream": True})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert response.text == "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in CHUNKS) + "data: [DONE]\n\n"
    assert fake_wire.closed == 1


def test_errors_keep_their_body_and_status(client):
    for stream in (False, True):
        response = ask(client, {"model": "gpt-4o", "refuse": True, "stream": stream})
        assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    events = ask(client, {"model": "m", "fail": True, "stream": True}).text.split("\n\n")
    assert json.loads(events[1].removeprefix("data: "))["error"]["message"] == "boom"
    assert events[-2:] == ["data: [DONE]", ""]


def test_an_unreachable_triton_is_a_503(client):
    for stream in (False, True):
        response = ask(client, {"unreachable": True, "stream": stream})
        assert response.status_code == 503 and response.json()["error"]["code"] == "service_unavailable"


# ------------------------------------------------------------------------------------------
# GET /v1/models/{id}
# ------------------------------------------------------------------------------------------


def test_a_model_is_its_entry_of_the_list(client):
    [entry] = client.get("/v1/models").json()["data"]
    assert entry["id"] == "tiny-chat"
    assert client.get("/v1/models/tiny-chat").json() == entry


def test_an_unknown_model_is_a_404_in_openais_shape(client):
    response = client.get("/v1/models/gpt-4o")
    assert response.status_code == 404
    assert response.json() == {"error": {"message": "The model 'gpt-4o' does not exist.",
                                         "type": "invalid_request_error", "param": "model",
                                         "code": "model_not_found"}}


def test_a_model_id_may_hold_slashes(fake_wire):
    with gateway(fake_wire, transport=triton_transport(served="meta-llama/Llama-3.1-8B")) as client:
        assert client.get("/v1/models/meta-llama/Llama-3.1-8B").json()["id"] == "meta-llama/Llama-3.1-8B"
        assert client.get("/v1/models/meta-llama%2FLlama-3.1-8B").status_code == 200


def test_models_when_triton_is_down(fake_wire):
    with gateway(fake_wire, transport=triton_transport(down=True)) as client:
        assert client.get("/v1/models").status_code == 503
        assert client.get("/v1/models/tiny-chat").json()["error"]["code"] == "service_unavailable"


def test_the_openai_sdk_retrieves_models_and_chats(fake_wire):
    app = create_app(wire=fake_wire, transport=triton_transport(), api_key=KEY)

    async def run():
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
        async with openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=KEY, http_client=http,
                                      max_retries=0) as sdk:
            model = await sdk.models.retrieve("tiny-chat")
            listed = [m.id async for m in sdk.models.list()]
            with pytest.raises(openai.NotFoundError) as info:
                await sdk.models.retrieve("gpt-4o")
            completion = await sdk.chat.completions.create(model="tiny-chat", messages=[])
            stream = await sdk.chat.completions.create(model="tiny-chat", messages=[], stream=True)
            text = "".join([chunk.choices[0].delta.content async for chunk in stream])
        return model, listed, info.value, completion, text

    model, listed, error, completion, text = asyncio.run(run())
    assert model.id == "tiny-chat" and model.owned_by == "tritonchat" and listed == ["tiny-chat"]
    assert error.status_code == 404 and error.body["code"] == "model_not_found"
    assert completion.choices[0].message.content == "Hello world" and text == "Hello world"


# ------------------------------------------------------------------------------------------
# Health
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ready", "down", "expected"), [(True, False, 200), (False, False, 503), (True, True, 503)])
def test_health_ready_and_live(fake_wire, ready, down, expected):
    with gateway(fake_wire, transport=triton_transport(ready=ready, down=down)) as client:
        assert client.get("/health").status_code == expected
        assert client.get("/health/ready").status_code == expected
        assert client.get("/health/live").status_code == 200  # the gateway is up, whatever Triton says


# ------------------------------------------------------------------------------------------
# The request-body cap
# ------------------------------------------------------------------------------------------


def test_the_body_cap_defaults_to_the_chat_models_max_request_bytes():
    [field] = [f for f in dataclasses.fields(Settings) if f.name == "max_request_bytes"]
    assert MAX_BODY_BYTES == field.default
    assert parser().parse_args([]).max_body_bytes == field.default


def test_a_body_over_the_cap_is_a_413_and_never_reaches_triton(fake_wire):
    with gateway(fake_wire, max_body_bytes=100) as client:
        small = {"model": "m", "pad": "x" * 40}
        assert ask(client, small).status_code == 200
        big = json.dumps({"model": "m", "pad": "x" * 200})
        response = client.post("/v1/chat/completions", content=big)
        assert response.status_code == 413
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "request_too_large"
        assert "100 bytes" in error["message"]

        def chunked():  # no Content-Length: counted as it is read
            yield big[:60].encode()
            yield big[60:].encode()

        response = client.post("/v1/chat/completions", content=chunked())
        assert "content-length" not in response.request.headers
        assert response.status_code == 413
    assert len(fake_wire.calls) == 1


def test_the_cap_stops_reading_as_soon_as_it_is_passed():
    called, sent, reads = [], [], []
    parts = [b"a" * 40, b"b" * 40, b"c" * 40, b"d" * 40]

    async def app(scope, receive, send):
        called.append(scope)

    async def receive():
        reads.append(len(reads))
        return {"type": "http.request", "body": parts[len(reads) - 1], "more_body": len(reads) < len(parts)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    asyncio.run(BodyCap(app, limit=100)(scope, receive, send))
    assert called == [] and len(reads) == 3 and sent[0]["status"] == 413


def test_a_body_within_the_cap_reaches_the_app_whole_and_then_the_disconnect():
    seen = []
    parts = [{"type": "http.request", "body": b"ab", "more_body": True},
             {"type": "http.request", "body": b"cd", "more_body": False}, {"type": "http.disconnect"}]

    async def app(scope, receive, send):
        seen.append(await receive())
        seen.append(await receive())

    async def receive():
        return parts.pop(0)

    asyncio.run(BodyCap(app, limit=4)({"type": "http", "headers": [(b"content-length", b"4")]}, receive, None))
    assert seen == [{"type": "http.request", "body": b"abcd", "more_body": False}, {"type": "http.disconnect"}]


# ------------------------------------------------------------------------------------------
# API keys per group
# ------------------------------------------------------------------------------------------


def test_route_groups():
    assert [group_of(p) for p in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models",
                                  "/v1/models/a/b", "/health", "/health/ready", "/health/live", "/")] == [
        "inference", "inference", "inference", "models", "models", "health", "health", "health", None]


def test_resolve_keys():
    assert resolve_keys(None) == {}
    assert resolve_keys(KEY) == {"inference": KEY, "models": KEY}  # health stays open for probes
    assert resolve_keys(KEY, {"models": "m", "health": "h"}) == {"inference": KEY, "models": "m", "health": "h"}
    assert resolve_keys(None, {"inference": "i", "models": ""}) == {"inference": "i"}
    with pytest.raises(ValueError, match="unknown API group 'metrics'"):
        resolve_keys(KEY, {"metrics": "x"})


def status(client, path: str, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    if path.startswith("/v1/chat"):
        return client.post(path, content="{}", headers=headers).status_code
    return client.get(path, headers=headers).status_code


def test_the_single_key_guards_the_v1_routes_and_not_health(fake_wire):
    with gateway(fake_wire, api_key=KEY) as client:
        for path in ("/v1/chat/completions", "/v1/models", "/v1/models/tiny-chat"):
            assert (status(client, path, None), status(client, path, "wrong"), status(client, path, KEY)) == (
                401, 401, 200), path
        assert status(client, "/health", None) == status(client, "/health/live", None) == 200


def test_a_group_with_a_key_of_its_own(fake_wire):
    keys = {"models": "sk-models", "health": "sk-health"}
    with gateway(fake_wire, api_key=KEY, api_keys=keys) as client:
        assert status(client, "/v1/chat/completions", KEY) == 200
        assert status(client, "/v1/chat/completions", "sk-models") == 401
        assert status(client, "/v1/models", "sk-models") == 200 and status(client, "/v1/models", KEY) == 401
        assert status(client, "/health/ready", None) == 401 and status(client, "/health/ready", "sk-health") == 200
        assert status(client, "/health/live", KEY) == 401
    with gateway(fake_wire, api_keys={"inference": "sk-inference"}) as client:  # no single key: others open
        assert status(client, "/v1/chat/completions", "sk-inference") == 200
        assert status(client, "/v1/chat/completions", None) == 401
        assert status(client, "/v1/models", None) == 200


def test_a_wrong_key_is_a_401_that_shows_no_key(fake_wire, caplog):
    wrong = "sk-wrong-value-5678"
    with gateway(fake_wire, api_key=KEY) as client, caplog.at_level(logging.DEBUG):
        response = client.post("/v1/chat/completions", content="{}", headers={"Authorization": f"Bearer {wrong}"})
        missing = client.get("/v1/models")
        basic = client.get("/v1/models", headers={"Authorization": f"Basic {KEY}"})
    assert response.status_code == missing.status_code == basic.status_code == 401
    error = response.json()["error"]
    assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
    assert missing.json()["error"]["type"] == "authentication_error"
    for text in (response.text, missing.text, str(response.headers), caplog.text):
        assert wrong not in text and KEY not in text
    assert "401 for POST /v1/chat/completions (the inference group): a wrong API key" in caplog.text
    assert fake_wire.calls == []


def test_group_keys_from_the_environment_and_the_command_line():
    environ = {"TRITONCHAT_API_KEY_MODELS": "env-models", "TRITONCHAT_API_KEY_HEALTH": ""}
    assert group_keys([], environ) == {"models": "env-models"}
    assert group_keys(["models=cli-models", "health=cli-health"], environ) == {
        "models": "cli-models", "health": "cli-health"}
    for entry in ("metrics=sk-secret", "sk-secret"):
        with pytest.raises(ValueError) as info:
            group_keys([entry], {})
        assert "sk-secret" not in str(info.value)


def test_a_bad_api_key_for_is_refused_without_showing_the_key(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--api-key-for", "everything=sk-secret"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown group 'everything'" in err and "sk-secret" not in err


def test_the_gateways_protocols_are_the_wires():
    assert list(PROTOCOLS) == sorted(wires.ASYNC_WIRES)


def test_tokenize_and_detokenize_go_to_the_chat_model_marked_and_need_the_inference_key(fake_wire):
    """vLLM's /tokenize and /detokenize: the body goes to the chat model with its `endpoint`, never
    streamed, and the routes are in the `inference` group."""
    with gateway(fake_wire, api_key="k") as client:
        assert ask(client, {"prompt": "Hi", "stream": True}, "/tokenize").status_code == 401
        response = ask(client, {"prompt": "Hi", "stream": True}, "/tokenize", authorization="Bearer k")
        assert response.status_code == 200 and response.json() == COMPLETION
        assert ask(client, {"tokens": [1, 2]}, "/detokenize", authorization="Bearer k").status_code == 200
    assert [(model, json.loads(body), stream) for model, body, stream in fake_wire.calls] == [
        ("openai_chat", {"prompt": "Hi", "stream": True, "endpoint": "tokenize"}, False),
        ("openai_chat", {"tokens": [1, 2], "endpoint": "detokenize"}, False)]
