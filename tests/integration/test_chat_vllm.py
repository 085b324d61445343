"""`openai_chat` as committed, through real tritonserver, on the tiny model in the real vLLM engine."""

from __future__ import annotations

import json
import threading

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.helpers import ChatClient, GrpcChatClient

pytestmark = [pytest.mark.integration, pytest.mark.models("openai_chat")]

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Tell me about the river."},
]


def greedy(max_tokens: int, **fields) -> dict:
    return {"model": "tiny-chat", "messages": CONVERSATION, "temperature": 0, "max_completion_tokens": max_tokens, **fields}


def test_completion(tiny, tiny_model):
    from transformers import AutoTokenizer

    status, body = tiny.create(greedy(12))
    assert status == 200
    completion = ChatCompletion.model_validate(body)
    assert completion.model == "tiny-chat"
    choice = completion.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    # Random weights rarely say EOS: the budget ends the answer.
    assert choice.finish_reason == "length"
    assert completion.usage.completion_tokens == 12
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    rendered = tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=False)
    assert completion.usage.prompt_tokens == len(tokenizer(rendered, add_special_tokens=False).input_ids)
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 12


def test_streaming_text_equals_non_streaming_text(tiny):
    _, body = tiny.create(greedy(40))
    result = tiny.stream(greedy(40, stream=True, stream_options={"include_usage": True}))
    assert result.error is None
    for chunk in result.chunks:
        ChatCompletionChunk.model_validate(chunk)
    assert result.content == body["choices"][0]["message"]["content"]
    assert result.chunks[-2]["choices"][0]["finish_reason"] == body["choices"][0]["finish_reason"]
    assert result.chunks[-1]["usage"] == body["usage"]


@pytest.mark.models("chat_whole_streamed")
def test_a_whole_answer_asked_as_a_stream_is_the_same_answer(triton):
    """`vllm_stream_whole`: the backend streams, the answer is assembled here; same text, finish
    reason and usage as the one-response answer (greedy), with logprobs too."""
    one, streamed = ChatClient(triton.http_url, "openai_chat"), ChatClient(triton.http_url, "chat_whole_streamed")
    for fields in ({}, {"logprobs": True, "top_logprobs": 2}):
        _, whole = one.create(greedy(24, **fields))
        _, assembled = streamed.create(greedy(24, **fields))
        ChatCompletion.model_validate(assembled)
        assert assembled["choices"] == whole["choices"]
        assert assembled["usage"] == whole["usage"]


def test_default_budget_fills_the_context(tiny):
    request = {"messages": CONVERSATION, "temperature": 0, "ignore_eos": True, "stream": True,
               "stream_options": {"include_usage": True}}
    result = tiny.stream(request)
    usage = result.chunks[-1]["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] == 2048
    assert result.chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_context_length_exceeded(tiny):
    status, body = tiny.create(greedy(2040))
    assert status == 400
    assert body["error"]["code"] == "context_length_exceeded"
    assert "2048" in body["error"]["message"]


def test_seeded_sampling_is_reproducible(tiny):
    request = {"messages": CONVERSATION, "temperature": 1.0, "seed": 1234, "max_tokens": 16}
    first = tiny.create(request)[1]["choices"][0]["message"]["content"]
    second = tiny.create(request)[1]["choices"][0]["message"]["content"]
    assert first == second


def test_concurrent_requests(tiny):
    _, reference = tiny.create(greedy(16))
    results = []

    def run():
        results.append(tiny.stream(greedy(16, stream=True)).content)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [reference["choices"][0]["message"]["content"]] * 8


def test_grpc_stream(triton, tiny):
    _, body = tiny.create(greedy(10))
    payloads, error = GrpcChatClient(triton.grpc_url, "openai_chat").stream(greedy(10, stream=True))
    assert error is None
    text = "".join(p["choices"][0]["delta"].get("content", "") for p in payloads)
    assert text == body["choices"][0]["message"]["content"]
    assert json.dumps(payloads[0]["choices"][0]["delta"]) == '{"role": "assistant", "content": ""}'
