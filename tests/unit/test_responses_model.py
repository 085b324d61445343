"""The `openai_responses` Triton model driven as Triton drives it (see test_triton_glue.py):
events and responses as its responses, each a valid `openai` SDK type, and errors as Triton
errors whose message is an OpenAI error object naming the Responses request's fields, with the
right Triton code."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.unit import fakes
from tests.unit.test_triton_glue import Stub, vllm_response
from tritonchat.triton import OpenAIResponsesModel

EVENT = TypeAdapter(ResponseStreamEvent)


def hello(_kwargs, _index):
    return fakes.ResponseIterator([vllm_response("Hello"), vllm_response(" world", "stop")])


@pytest.fixture
def stub(monkeypatch, tiny_model):
    made = []

    def make(script=hello, **parameters):
        made.append(Stub(monkeypatch, tiny_model, script, model_class=OpenAIResponsesModel, **parameters))
        return made[-1]

    yield make
    for one in made:
        one.close()


def responses(**fields) -> str:
    return json.dumps({"model": "tiny", "input": "Hi", "max_output_tokens": 16, **fields})


def test_a_stream_is_one_event_per_response_and_one_final(stub):
    model = stub()
    request = fakes.Request(responses(stream=True), request_id="r1")
    model.execute(request)
    events = request.sender.payloads()
    for event in events:
        EVENT.validate_python(event)
    kinds = [e["type"] for e in events]  # outputs that arrive during a send are merged: one delta or two
    assert [k for i, k in enumerate(kinds) if not i or kinds[i - 1] != k] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Hello world"
    final = events[-1]["response"]
    assert final["id"] == events[0]["response"]["id"] == "resp_r1" and final["status"] == "completed"
    assert final["usage"]["input_tokens"] == 7 and final["usage"]["output_tokens"] == 2
    flags = [flags for _, flags in request.sender.responses]
    assert flags.count(fakes.FINAL) == 1 and flags[-1] == fakes.FINAL


def test_a_whole_response_is_one_response(stub):
    model = stub()
    request = fakes.Request(responses(instructions="Be brief.", metadata={"k": "v"}))
    model.execute(request)
    [response] = request.sender.payloads()
    parsed = Response.model_validate(response)
    assert parsed.output_text == "Hello world" and parsed.status == "completed"
    assert response["instructions"] == "Be brief." and response["metadata"] == {"k": "v"}
    assert response["usage"]["total_tokens"] == 9 and response["max_output_tokens"] == 16


@pytest.mark.parametrize(("body", "code", "param"), [
    ("{not json", fakes.TritonError.INVALID_ARG, None),
    (responses(temperature=3), fakes.TritonError.INVALID_ARG, "temperature"),
    (responses(max_output_tokens=100_000), fakes.TritonError.INVALID_ARG, "max_output_tokens"),
    (responses(previous_response_id="resp_1"), fakes.TritonError.INVALID_ARG, "previous_response_id"),
    (responses(model="gpt-5"), fakes.TritonError.NOT_FOUND, "model"),
], ids=["bad-json", "bad-field", "over-the-context", "stored-state", "unknown-model"])
def test_refusals_are_openai_errors_with_their_triton_code(stub, body, code, param):
    model = stub()
    request = fakes.Request(body)
    model.execute(request)
    [error] = request.sender.errors()
    assert error.code() == code
    shaped = json.loads(error.message())["error"]
    assert set(shaped) == {"message", "type", "param", "code"} and shaped["param"] == param
    assert "max_completion_tokens" not in shaped["message"]
    assert model.calls == []


def test_failures_of_the_generation_model_are_openai_errors(stub):
    def failing(_kwargs, _index):
        error = fakes.InferenceResponse([], fakes.TritonError("engine fell over", fakes.TritonError.INTERNAL))
        return fakes.ResponseIterator([vllm_response("Hel"), error])

    model = stub(failing)
    request = fakes.Request(responses(stream=True))
    model.execute(request)
    [error] = request.sender.errors()
    assert error.code() == fakes.TritonError.INTERNAL
    assert json.loads(error.message())["error"]["type"] == "server_error" and "engine fell over" in error.message()
    assert request.sender.payloads()[0]["type"] == "response.created"


def test_the_budget_leaves_the_response_incomplete(stub):
    def cut(_kwargs, _index):
        return fakes.ResponseIterator([vllm_response("Hello"), vllm_response(" wor", "length")])

    model = stub(cut)
    request = fakes.Request(responses(stream=True))
    model.execute(request)
    events = request.sender.payloads()
    assert events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"][0]["status"] == "incomplete"


def test_the_shipped_model_and_make_serve(tmp_path):
    from harness.repositories import ROOT  # noqa: PLC0415
    from tritonchat.repository import prepare_repository  # noqa: PLC0415
    from tritonchat.settings_docs import shipped_parameters  # noqa: PLC0415

    repo = ROOT / "model_repository"
    config = (repo / "openai_responses" / "config.pbtxt").read_text()
    assert 'backend: "python"' in config and shipped_parameters() in config and "input [" not in config
    assert "(OpenAIResponsesModel)" in (repo / "openai_responses" / "1" / "model.py").read_text()
    dst = prepare_repository(repo, tmp_path / "r", served_model_name="x", chat_parameters={"http_url": "localhost:9"})
    config = (dst / "openai_responses" / "config.pbtxt").read_text()
    assert 'key: "served_model_name", value: { string_value: "x" }' in config
    assert 'key: "http_url", value: { string_value: "localhost:9" }' in config
