"""The `anthropic_messages` Triton model driven as Triton drives it (see test_triton_glue.py):
events and messages as its responses, count_tokens answered without the generation model, and
errors as Triton errors whose message is Anthropic's error object, with the right Triton code."""

from __future__ import annotations

import json

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from tests.unit import fakes
from tests.unit.test_triton_glue import Stub, vllm_response
from tritonchat.triton import AnthropicMessagesModel


def hello(_kwargs, _index):
    return fakes.ResponseIterator([vllm_response("Hello"), vllm_response(" world", "stop")])


@pytest.fixture
def stub(monkeypatch, tiny_model):
    made = []

    def make(script=hello, **parameters):
        made.append(Stub(monkeypatch, tiny_model, script, model_class=AnthropicMessagesModel, **parameters))
        return made[-1]

    yield make
    for one in made:
        one.close()


def messages(**fields) -> str:
    return json.dumps({"model": "tiny", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}], **fields})


def test_a_stream_is_one_event_per_response_and_one_final(stub):
    model = stub()
    request = fakes.Request(messages(stream=True), request_id="r1")
    model.execute(request)
    events = request.sender.payloads()
    for event in events:
        TypeAdapter(RawMessageStreamEvent).validate_python(event)
    kinds = [e["type"] for e in events]  # outputs that arrive during a send are merged: one delta or two
    assert [k for i, k in enumerate(kinds) if not i or kinds[i - 1] != k] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]
    assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") == "Hello world"
    assert events[0]["message"]["id"] == "msg_r1" and events[-2]["usage"] == {"input_tokens": 7, "output_tokens": 2}
    flags = [flags for _, flags in request.sender.responses]
    assert flags.count(fakes.FINAL) == 1 and flags[-1] == fakes.FINAL


def test_a_whole_message_is_one_response(stub):
    model = stub()
    request = fakes.Request(messages())
    model.execute(request)
    [message] = request.sender.payloads()
    assert Message.model_validate(message).content[0].text == "Hello world"
    assert message["stop_reason"] == "end_turn" and message["usage"] == {"input_tokens": 7, "output_tokens": 2}


def test_count_tokens_never_calls_the_generation_model(stub):
    model = stub()
    request = fakes.Request(json.dumps({"endpoint": "count_tokens", "model": "tiny",
                                        "messages": [{"role": "user", "content": "Hi"}]}))
    model.execute(request)
    [(response, flags)] = request.sender.responses
    assert flags == fakes.FINAL and not response.has_error()
    count = json.loads(response.output_tensors()[0].as_numpy()[0])
    assert list(count) == ["input_tokens"] and count["input_tokens"] > 0
    assert model.calls == []


@pytest.mark.parametrize(("body", "code", "kind"), [
    ("{not json", fakes.TritonError.INVALID_ARG, "invalid_request_error"),
    (messages(temperature=3), fakes.TritonError.INVALID_ARG, "invalid_request_error"),
    (messages(model="claude-sonnet-4-5"), fakes.TritonError.NOT_FOUND, "not_found_error"),
], ids=["bad-json", "bad-field", "unknown-model"])
def test_refusals_are_anthropic_errors_with_their_triton_code(stub, body, code, kind):
    model = stub()
    request = fakes.Request(body)
    model.execute(request)
    [error] = request.sender.errors()
    assert error.code() == code
    shaped = json.loads(error.message())
    assert shaped["type"] == "error" and shaped["error"]["type"] == kind and set(shaped["error"]) == {"type", "message"}
    assert model.calls == []


def test_failures_of_the_generation_model_are_anthropic_errors(stub):
    def failing(_kwargs, _index):
        error = fakes.InferenceResponse([], fakes.TritonError("engine fell over", fakes.TritonError.INTERNAL))
        return fakes.ResponseIterator([vllm_response("Hel"), error])

    def missing(_kwargs, _index):
        error = fakes.TritonError("Request for unknown model: 'vllm_model' is not found", fakes.TritonError.NOT_FOUND)
        return fakes.ResponseIterator([fakes.InferenceResponse([], error)])

    model = stub(failing)
    request = fakes.Request(messages(stream=True))
    model.execute(request)
    [error] = request.sender.errors()
    assert error.code() == fakes.TritonError.INTERNAL
    assert json.loads(error.message())["error"]["type"] == "api_error" and "engine fell over" in error.message()
    assert request.sender.payloads()[0]["type"] == "message_start"
    model = stub(missing)
    request = fakes.Request(messages())
    model.execute(request)
    [error] = request.sender.errors()
    assert error.code() == fakes.TritonError.UNAVAILABLE  # Anthropic's 529, UNAVAILABLE in Triton
    assert json.loads(error.message())["error"]["type"] == "overloaded_error"


def test_the_shipped_model_and_make_serve(tmp_path):
    from harness.repositories import ROOT  # noqa: PLC0415
    from tritonchat.repository import prepare_repository  # noqa: PLC0415
    from tritonchat.settings_docs import shipped_parameters  # noqa: PLC0415

    repo = ROOT / "model_repository"
    config = (repo / "anthropic_messages" / "config.pbtxt").read_text()
    assert 'backend: "python"' in config and shipped_parameters() in config and "input [" not in config
    assert "(AnthropicMessagesModel)" in (repo / "anthropic_messages" / "1" / "model.py").read_text()
    dst = prepare_repository(repo, tmp_path / "r", served_model_name="x", chat_parameters={"http_url": "localhost:9"})
    config = (dst / "anthropic_messages" / "config.pbtxt").read_text()
    assert 'key: "served_model_name", value: { string_value: "x" }' in config
    assert 'key: "http_url", value: { string_value: "localhost:9" }' in config
