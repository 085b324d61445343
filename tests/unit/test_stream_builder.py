"""Chunk and completion JSON: OpenAI's layout and field order, validated with the `openai` types."""

from __future__ import annotations

import json

from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tritonchat.formats import GenerationOutput
from tritonchat.chunks import ChatResponseBuilder, openai_finish_reason


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
    assert openai_finish_reason("abort") == "abort"  # passed on, as vLLM's server does; never made "stop"


def test_merge_keeps_order_and_sums():
    merged = GenerationOutput("a", None, 5, 1).merge(GenerationOutput("b", "stop", None, 2))
    assert merged == GenerationOutput("ab", "stop", 5, 3)


# ---- log probabilities ---------------------------------------------------------------------
from openai.types import Completion  # noqa: E402

from tritonchat.formats import TokenLogprob  # noqa: E402
from tritonchat.formats.vllm import parse_logprobs  # noqa: E402
from tritonchat.completion_chunks import CompletionResponseBuilder  # noqa: E402


def test_parse_vllm_logprobs_first_entry_is_the_sampled_token():
    raw = json.dumps([
        {"7": {"logprob": -2.5, "rank": 4, "decoded_token": " b"}, "3": {"logprob": -0.1, "rank": 1, "decoded_token": " a"},
         "9": {"logprob": -1.0, "rank": 2, "decoded_token": " c"}},
        {"5": {"logprob": -0.2, "rank": 1, "decoded_token": "!"}},
    ])
    first, second = parse_logprobs(raw)
    assert (first.token_id, first.token, first.logprob) == (7, " b", -2.5)
    assert [entry[0] for entry in first.top] == [3, 9, 7]
    assert second.token == "!" and parse_logprobs("null") is None


def lp(token_id, token, logprob, *alternatives):
    return TokenLogprob(token_id, token, logprob, list(alternatives))


def test_chat_logprobs_stream_and_whole():
    tokens = [lp(1, "Hi", -0.5, (1, "Hi", -0.5, 1), (2, "Yo", -1.5, 2), (3, "Hey", -2.0, 3)),
              lp(4, "\ufffd", -3.0, (9, "!", -0.2, 1), (8, "?", -1.2, 2), (4, "\ufffd", -3.0, 7))]
    bytes_of = {1: [72, 105], 2: [89, 111], 3: [72, 101, 121], 4: [0xE4], 8: [63], 9: [33]}
    b = make(top_logprobs=2, token_bytes=lambda token_id, text: bytes_of[token_id])
    chunks = b.stream_output(0, GenerationOutput(text="Hi\ufffd", logprobs=tokens, completion_tokens=2))
    for chunk in chunks:
        ChatCompletionChunk.model_validate_json(chunk)
    content = json.loads(chunks[1])["choices"][0]["logprobs"]["content"]
    assert content[0] == {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [
        {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}, {"token": "Yo", "logprob": -1.5, "bytes": [89, 111]}]}
    assert content[1]["bytes"] == [0xE4] and [t["token"] for t in content[1]["top_logprobs"]] == ["!", "?"]
    whole = make(top_logprobs=0)
    whole.add_output(0, GenerationOutput(text="Hi", logprobs=tokens[:1], completion_tokens=1, finish_reason="stop"))
    completion = json.loads(whole.completion())
    ChatCompletion.model_validate(completion)
    assert completion["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == []
    assert json.loads(make().completion())["choices"][0]["logprobs"] is None


def test_continuous_usage_on_every_chunk():
    b = make(include_usage=True, continuous_usage=True, prompt_tokens=3)
    chunks = b.stream_output(0, GenerationOutput(text="a", completion_tokens=1))
    assert json.loads(chunks[-1])["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    chunks = b.stream_output(0, GenerationOutput(text="b", completion_tokens=1))
    assert json.loads(chunks[-1])["usage"]["completion_tokens"] == 2


def completions(**kw) -> CompletionResponseBuilder:
    return CompletionResponseBuilder(completion_id="cmpl-1", created=1, model="m", system_fingerprint="fp", **kw)


def test_completion_stream_layout():
    b = completions(echo_text="Say: ", include_usage=True)
    chunks = b.stream_output(0, GenerationOutput(text="hi", completion_tokens=1, prompt_tokens=2))
    chunks += b.stream_output(0, GenerationOutput(text=" there", completion_tokens=1, finish_reason="length"))
    chunks += b.stream_finish(0) + b.stream_usage()
    parsed = [json.loads(c) for c in chunks]
    for chunk in parsed:
        # The SDK streams completions as `Completion` objects whose finish_reason is null
        # until the end; its type only admits null there by not validating.
        if not chunk["choices"] or chunk["choices"][0]["finish_reason"]:
            Completion.model_validate(chunk)
    assert [c["choices"][0]["text"] for c in parsed[:-1]] == ["Say: ", "hi", " there", ""]
    assert [c["choices"][0]["finish_reason"] for c in parsed[:-1]] == [None, None, None, "length"]
    assert parsed[-1]["choices"] == [] and parsed[-1]["usage"]["total_tokens"] == 4
    assert {c["object"] for c in parsed} == {"text_completion"}


def test_completion_whole_with_logprobs():
    b = completions(top_logprobs=1)
    tokens = [lp(1, "He", -0.1, (1, "He", -0.1, 1), (2, "Ha", -2.0, 2)), lp(3, "y", -0.3, (5, "!", -0.2, 1), (3, "y", -0.3, 2))]
    b.add_output(0, GenerationOutput(text="Hey", logprobs=tokens, completion_tokens=2, finish_reason="stop", prompt_tokens=4))
    completion = json.loads(b.completion())
    Completion.model_validate(completion)
    choice = completion["choices"][0]
    assert choice["text"] == "Hey"
    assert choice["logprobs"] == {
        "tokens": ["He", "y"],
        "token_logprobs": [-0.1, -0.3],
        "top_logprobs": [{"He": -0.1}, {"!": -0.2, "y": -0.3}],
        "text_offset": [0, 2],
    }
    assert completion["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
