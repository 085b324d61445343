"""Chunk and completion JSON: OpenAI's layout and field order, validated with the `openai` types."""

from __future__ import annotations

import json

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tritonchat.backends import GenerationOutput
from tritonchat.stream import ChatResponseBuilder, openai_finish_reason


def make(**kw) -> ChatResponseBuilder:
    return ChatResponseBuilder(completion_id="chatcmpl-1", created=1700000000, model="m", system_fingerprint="fp_x", **kw)


def test_chunks_are_compact_and_in_openai_order():
    b = make()
    chunks = b.stream_output(0, GenerationOutput(text="Hé 🎉", completion_tokens=2, prompt_tokens=3))
    assert chunks[0] == (
        '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m",'
        '"system_fingerprint":"fp_x","choices":[{"index":0,"delta":{"role":"assistant","content":""},'
        '"logprobs":null,"finish_reason":null}]}'
    )
    assert chunks[1].endswith('"choices":[{"index":0,"delta":{"content":"Hé 🎉"},"logprobs":null,"finish_reason":null}]}')
    for chunk in chunks + b.stream_finish(0):
        ChatCompletionChunk.model_validate_json(chunk)


def test_finish_chunk_has_empty_delta_and_reason():
    b = make()
    b.stream_output(0, GenerationOutput(text="x", finish_reason="length", completion_tokens=1))
    [finish] = b.stream_finish(0)
    choice = json.loads(finish)["choices"][0]
    assert choice == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}


def test_role_chunk_is_sent_even_without_output():
    b = make()
    deltas = [json.loads(c)["choices"][0]["delta"] for c in b.stream_finish(0)]
    assert deltas == [{"role": "assistant", "content": ""}, {}]


def test_usage_chunk_and_usage_null():
    b = make(include_usage=True, prompt_tokens=4)
    chunks = b.stream_output(0, GenerationOutput(text="a", completion_tokens=1))
    assert all(json.loads(c)["usage"] is None for c in chunks)
    [usage] = b.stream_usage()
    parsed = json.loads(usage)
    assert parsed["choices"] == []
    assert parsed["usage"] == {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}
    ChatCompletionChunk.model_validate(parsed)
    assert make().stream_usage() == []


def test_completion():
    b = make(prompt_tokens=2)
    b.add_output(0, GenerationOutput(text="Hello", completion_tokens=1, prompt_tokens=6))
    b.add_output(0, GenerationOutput(text=" there", completion_tokens=1, finish_reason="stop"))
    completion = json.loads(b.completion())
    ChatCompletion.model_validate(completion)
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": "Hello there", "refusal": None}
    assert completion["usage"] == {"prompt_tokens": 6, "completion_tokens": 2, "total_tokens": 8}


def test_finish_reasons():
    assert openai_finish_reason("length") == "length"
    assert openai_finish_reason(None) == "stop"
    assert openai_finish_reason("abort") == "stop"


def test_merge_keeps_order_and_sums():
    merged = GenerationOutput("a", None, 5, 1).merge(GenerationOutput("b", "stop", None, 2))
    assert merged == GenerationOutput("ab", "stop", 5, 3)
