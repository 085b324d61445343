"""The gateway's Responses route without a server: a fake wire answering with what the event
builder makes, through FastAPI's TestClient and through the official `openai` SDK over an ASGI
transport (server-sent events with their `event:` lines and no `[DONE]`, OpenAI's errors and
statuses, an error after the first event as an `error` event, the API keys' `inference` group)."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from fastapi.testclient import TestClient
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from tests.unit.test_gateway import triton_transport
from tritonchat.clients import api_error
from tritonchat.clients.gateway import create_app, parser
from tritonchat.clients.responses import error_event, event_name, failure
from tritonchat.clients.wires import httpx
from tritonchat.errors import BadRequestError, InternalError, NotFoundError, UnavailableError
from tritonchat.formats import GenerationOutput
from tritonchat.responses.events import ResponsesBuilder

KEY = "sk-responses-key-1234"
EVENT = TypeAdapter(ResponseStreamEvent)


def builder() -> ResponsesBuilder:
    return ResponsesBuilder(completion_id="resp_1", created=1, model="tiny", system_fingerprint="fp", prompt_tokens=7,
                            fields={"tools": [], "tool_choice": "auto", "parallel_tool_calls": True, "metadata": {}},
                            make_id=lambda kind: f"{kind}_1", clock=lambda: 2)


def outputs() -> list[GenerationOutput]:
    return [GenerationOutput(text="Hello", completion_tokens=1),
            GenerationOutput(text=" world", completion_tokens=1, finish_reason="stop")]


def events() -> list[str]:
    made = builder()
    return [event for output in outputs() for event in made.stream_output(0, output)] + made.stream_finish(0)


def whole() -> str:
    made = builder()
    for output in outputs():
        made.add_output(0, output)
    return made.completion()


class FakeWire:
    """The model's answers: `refuse` (an error before any event: a status), `fail` (after the
    first events), `unreachable`."""

    def __init__(self):
        self.calls: list[tuple[str, str, bool]] = []

    async def payloads(self, model: str, body: str, stream: bool):
        self.calls.append((model, body, stream))
        request = json.loads(body) if body.startswith("{") else {}
        if request.get("unreachable"):
            raise httpx.ConnectError("connection refused")
        refusal = {"400": BadRequestError("Unknown parameter: 'foo'.", param="foo", code="unknown_parameter"),
                   "404": NotFoundError("The model 'gpt-5' does not exist."),
                   "503": UnavailableError("busy")}.get(request.get("refuse"))
        if refusal is not None:
            raise api_error(refusal.to_json(), "fake")
        if not stream:
            yield whole()
            return
        for index, event in enumerate(events()):
            if request.get("fail") and index == 4:
                raise api_error(InternalError("boom").to_json(), "fake")
            yield event

    async def close(self) -> None:
        pass


@pytest.fixture
def wire():
    return FakeWire()


@pytest.fixture
def client(wire):
    with TestClient(create_app(wire=wire, transport=triton_transport(), api_key=KEY)) as client:
        yield client


def post(client, body: dict):
    return client.post("/v1/responses", content=json.dumps(body), headers={"authorization": f"Bearer {KEY}"})


def test_a_response_is_forwarded_unchanged(client, wire):
    body = '{"model": "tiny", "input": "Hi"}'
    response = client.post("/v1/responses", content=body, headers={"authorization": f"Bearer {KEY}"})
    assert response.status_code == 200 and response.text == whole()
    assert wire.calls == [("openai_responses", body, False)]


def test_a_stream_is_openais_server_sent_events(client):
    response = post(client, {"model": "tiny", "stream": True})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    assert response.text == "".join(f"event: {json.loads(e)['type']}\ndata: {e}\n\n" for e in events())
    assert "[DONE]" not in response.text


def test_errors_have_their_status_before_the_first_event_and_are_an_event_after_it(client):
    for stream in (False, True):
        response = post(client, {"refuse": "400", "stream": stream})
        assert response.status_code == 400 and response.json()["error"]["param"] == "foo"
        assert post(client, {"refuse": "404", "stream": stream}).status_code == 404
        assert post(client, {"refuse": "503", "stream": stream}).status_code == 503
        response = post(client, {"unreachable": True, "stream": stream})
        assert response.status_code == 503 and "Triton cannot be reached" in response.json()["error"]["message"]
    sent = post(client, {"fail": True, "stream": True}).text.split("\n\n")
    assert len(sent) == 6 and sent[-1] == ""
    name, data = sent[4].split("\n")
    assert name == "event: error" and json.loads(data.removeprefix("data: ")) == {
        "type": "error", "sequence_number": 4, "code": "server_error", "message": "boom", "param": None}
    EVENT.validate_json(data.removeprefix("data: "))


def test_the_route_is_in_the_inference_group(wire):
    with TestClient(create_app(wire=wire, transport=triton_transport(), api_keys={"inference": KEY})) as client:
        refused = client.post("/v1/responses", content="{}")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        assert client.post("/v1/responses", content="{}", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
        assert client.get("/v1/models").status_code == 200  # the models group has no key here


def test_the_openai_sdk_through_the_gateway(wire):
    async def run():
        app = create_app(wire=wire, transport=triton_transport(), api_key=KEY)
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
        async with openai.AsyncOpenAI(base_url="http://gateway/v1", api_key=KEY, http_client=http,
                                      max_retries=0) as sdk:
            response = await sdk.responses.create(model="tiny", input="Hi")
            async with sdk.responses.stream(model="tiny", input="Hi") as stream:
                kinds = [event.type async for event in stream]
                final = await stream.get_final_response()
            raw = [event async for event in await sdk.responses.create(model="tiny", input="Hi", stream=True)]
            with pytest.raises(openai.BadRequestError) as bad:
                await sdk.responses.create(model="tiny", input="Hi", extra_body={"refuse": "400"})
            with pytest.raises(openai.NotFoundError) as missing:
                await sdk.responses.create(model="tiny", input="Hi", extra_body={"refuse": "404"})
            failed = [event async for event in await sdk.responses.create(model="tiny", input="Hi", stream=True,
                                                                           extra_body={"fail": True})]
        return response, kinds, final, raw, bad.value, missing.value, failed

    response, kinds, final, raw, bad, missing, failed = asyncio.run(run())
    assert response.output_text == "Hello world" and response.usage.total_tokens == 9
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == "Hello world" and final.to_dict()["usage"] == response.to_dict()["usage"]
    assert [event.sequence_number for event in raw] == list(range(len(raw)))
    assert bad.status_code == 400 and bad.body["param"] == "foo" and bad.body["code"] == "unknown_parameter"
    assert missing.status_code == 404 and missing.body["code"] == "model_not_found"
    assert failed[-1].type == "error" and failed[-1].message == "boom" and failed[-1].sequence_number == 4


def test_event_names_failures_and_the_option():
    assert event_name('{"type":"response.completed","sequence_number":3}') == "response.completed"
    assert event_name('{"sequence_number": 1, "type": "x"}') == "x" and event_name("nonsense") == "error"
    status, body = failure(httpx.ConnectError("refused"))
    assert status == 503 and body["error"]["code"] == "service_unavailable"
    assert json.loads(error_event({"error": {"type": "server_error", "message": "m", "code": None}}, 7)) == {
        "type": "error", "sequence_number": 7, "code": "server_error", "message": "m", "param": None}
    assert parser().parse_args(["--responses-model", "mine"]).responses_model == "mine"
    assert parser().parse_args([]).responses_model == "openai_responses"
