"""`openai_chat` in front of the stand-in for TensorRT-LLM's LLM API model (`request_format:
llmapi`): what it sends, and the model's own ways (whole text so far per response, its finish
and stop reasons, stop-word trimming, decoupling from model.yaml). The conformance suite runs
over this format too (the `chat_llmapi` route in conftest.py)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import ChatClient, script, user

pytestmark = [
    pytest.mark.integration,
    pytest.mark.models(
        "chat_llmapi", "chat_llmapi_lora", "chat_llmapi_not_decoupled",
    ),
]


@pytest.fixture
def llmapi(triton) -> ChatClient:
    return ChatClient(triton.http_url, "chat_llmapi")


def echoed(client: ChatClient, **fields) -> dict:
    status, body = client.create({**user(script(echo_request=True)), **fields})
    assert status == 200, body
    return json.loads(body["choices"][0]["message"]["content"])


def test_inputs_have_no_batch_dimension_and_openai_defaults(llmapi):
    # The echo holds the stop string JSON-escaped, so it does not end the echo itself.
    seen = echoed(llmapi, max_tokens=20, temperature=0.3, top_k=5, stop=["ÄND"], seed=7, frequency_penalty=0.5)
    inputs = seen["inputs"]
    assert inputs["text_input"]["shape"] == [1] and inputs["text_input"]["dtype"] == "BYTES"
    assert "SCRIPT:" in inputs["text_input"]["value"][0]
    # A whole answer is streamed too: usage then counts the engine's steps, as in a stream.
    assert inputs["streaming"] == {"dtype": "BOOL", "shape": [1], "value": [True]}
    assert inputs["sampling_param_max_tokens"] == {"dtype": "INT32", "shape": [1], "value": [20]}
    assert inputs["sampling_param_temperature"]["dtype"] == "FP32"
    assert inputs["sampling_param_top_k"]["value"] == [5]
    assert inputs["sampling_param_top_p"] == {"dtype": "FP32", "shape": [1], "value": [1.0]}
    assert inputs["sampling_param_seed"] == {"dtype": "UINT64", "shape": [1], "value": [7]}
    assert inputs["sampling_param_stop"]["value"] == ["ÄND"]
    assert inputs["sampling_param_exclude_input_from_output"]["value"] == [True]
    assert inputs["return_finish_reason"]["value"] == [True] and inputs["return_stop_reason"]["value"] == [True]
    # Without a seed in the request each one gets its own: the LLM API would use the same for all.
    first, second = (echoed(llmapi)["inputs"]["sampling_param_seed"]["value"][0] for _ in range(2))
    assert first != second


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_string_ends_the_answer_before_it(llmapi, stream):
    request = {**user(script(text="Hello wörld, STOP here and more")), "stop": ["STOP"]}
    if stream:
        result = llmapi.stream({**request, "stream": True})
        assert result.error is None
        content, finish = result.content, [c["choices"][0]["finish_reason"] for c in result.chunks if c["choices"]][-1]
    else:
        _, body = llmapi.create(request)
        content, finish = body["choices"][0]["message"]["content"], body["choices"][0]["finish_reason"]
    assert content == "Hello wörld, " and finish == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_length_and_usage_counted_per_engine_step(llmapi, tokenizer, stream):
    text = " one two three four five six seven"
    request = {**user(script(text=text)), "max_tokens": 3, "stream": stream,
               **({"stream_options": {"include_usage": True}} if stream else {})}
    expected = tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)[:3])
    if stream:
        result = llmapi.stream(request)
        content = result.content
        finish = [c["choices"][0]["finish_reason"] for c in result.chunks if c["choices"]][-1]
        usage = result.chunks[-1]["usage"]
    else:
        _, body = llmapi.create(request)
        content, finish, usage = body["choices"][0]["message"]["content"], body["choices"][0]["finish_reason"], body["usage"]
    assert content == expected and finish == "length"
    assert usage["completion_tokens"] == 3


def test_a_model_that_is_not_decoupled_answers_a_stream_in_one_chunk(triton):
    """NVIDIA's model.yaml ships `decoupled: False`; the model then refuses `streaming`."""
    client = ChatClient(triton.http_url, "chat_llmapi_not_decoupled")
    text = " Hello wörld 你好"
    result = client.stream({**user(script(text=text)), "stream": True})
    assert result.error is None
    deltas = [c["choices"][0]["delta"] for c in result.chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert [d["content"] for d in deltas[1:] if d.get("content")] == [text]
    assert result.chunks[-1]["choices"][0]["finish_reason"] == "stop"
    _, body = client.create(user(script(echo_request=True)))
    assert json.loads(body["choices"][0]["message"]["content"])["inputs"]["streaming"]["value"] == [False]


def test_lora_adapter_by_name_and_path(triton, tmp_path_factory):
    client = ChatClient(triton.http_url, "chat_llmapi_lora")
    seen = echoed(client, model="scripted:tiny-lora")["inputs"]
    assert seen["lora_name"]["value"] == ["tiny-lora"]
    assert seen["lora_id"] == {"dtype": "UINT64", "shape": [1], "value": [1]}
    assert seen["lora_path"]["value"][0].endswith("tiny-lora")
    _, body = client.create({**user("hi"), "model": "scripted:other"})
    assert body["error"]["code"] == "model_not_found" and "tiny-lora" in body["error"]["message"]


def test_what_the_model_cannot_do_is_refused(llmapi):
    for field, value in (("logprobs", True), ("repetition_penalty", 1.1), ("min_tokens", 2),
                         ("response_format", {"type": "json_object"})):
        status, body = llmapi.create({**user("hi"), field: value})
        assert status == 400, (field, body)
        assert body["error"]["param"] == field, body


def test_an_engine_error_ends_the_stream_with_it(llmapi):
    result = llmapi.stream({**user(script(text=" a b c d", error_after=2, error_message="engine broke")), "stream": True})
    assert result.error is not None and "engine broke" in str(result.error), result.error
