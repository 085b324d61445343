"""The rest of OpenAI's fields through real tritonserver: n, logprobs, response_format, usage
options, stop strings, LoRA, request templates, and the Completions model."""

from __future__ import annotations

import json

import jsonschema
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.helpers import ChatClient, script, user

pytestmark = [pytest.mark.integration, pytest.mark.models("chat_scripted", "chat_scripted_bls")]

CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Tell me about the river."},
]



def greedy(max_tokens: int, **fields) -> dict:
    return {"messages": CONVERSATION, "temperature": 0, "max_completion_tokens": max_tokens, **fields}


def by_choice(chunks: list[dict]) -> dict[int, list[dict]]:
    choices: dict[int, list[dict]] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            choices.setdefault(choice["index"], []).append(choice)
    return choices


# ---- n choices -------------------------------------------------------------------------------
def test_n_choices_whole(scripted, expect):
    request = user(script(chunks=["a", "b"], prompt_tokens=5))
    status, body = scripted.create({**request, "n": 3})
    assert status == 200
    ChatCompletion.model_validate(body)
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in body["choices"]] == ["ab"] * 3
    prompt, generated = expect.prompt_tokens(request["messages"], 5), 3 * expect.completion_tokens(["a", "b"])
    assert body["usage"] == {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def test_n_choices_streamed(scripted, expect):
    request = {**user(script(chunks=["a", "b"], prompt_tokens=5, interval_ms=5)), "n": 2, "stream": True,
               "stream_options": {"include_usage": True}}
    result = scripted.stream(request)
    assert result.error is None
    for chunk in result.chunks:
        ChatCompletionChunk.model_validate(chunk)
    choices = by_choice(result.chunks)
    assert sorted(choices) == [0, 1]
    for events in choices.values():
        assert events[0]["delta"] == {"role": "assistant", "content": ""}
        assert "".join(e["delta"].get("content", "") for e in events) == "ab"
        assert [e["finish_reason"] for e in events if e["finish_reason"]] == ["stop"]
    assert result.chunks[-1]["choices"] == [] and result.chunks[-1]["usage"]["completion_tokens"] == 2 * expect.completion_tokens(["a", "b"])


def test_n_choices_use_consecutive_seeds(vllm_scripted):
    _, body = vllm_scripted.create({**user(script(echo_request=True)), "n": 2, "seed": 7})
    seeds = [json.loads(c["message"]["content"])["sampling_parameters"]["seed"] for c in body["choices"]]
    assert seeds == [7, 8]


def test_n_choices_on_the_engine(tiny):
    request = {"messages": CONVERSATION, "n": 2, "temperature": 1.0, "seed": 5, "max_tokens": 12}
    _, first = tiny.create(request)
    _, second = tiny.create(request)
    texts = [c["message"]["content"] for c in first["choices"]]
    assert texts == [c["message"]["content"] for c in second["choices"]]
    assert texts[0] != texts[1]
    assert first["usage"]["completion_tokens"] == 24


# ---- every sampling field reaches the engine -------------------------------------------------------
def test_sampling_fields_reach_the_engine(vllm_scripted):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    request = {
        **user(script(echo_request=True)),
        "max_tokens": 9,
        "top_k": 5,
        "min_p": 0.1,
        "repetition_penalty": 1.1,
        "stop_token_ids": [3],
        "min_tokens": 2,
        "ignore_eos": True,
        "stop": ["END", "STOP"],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        "user": "someone",
        "metadata": {"k": "v"},
    }
    _, body = vllm_scripted.create(request)
    params = json.loads(body["choices"][0]["message"]["content"])["sampling_parameters"]
    assert params == {
        "max_tokens": 9,
        "top_k": 5,
        "min_p": 0.1,
        "repetition_penalty": 1.1,
        "stop_token_ids": [3],
        "min_tokens": 2,
        "ignore_eos": True,
        "stop": ["END", "STOP"],
        "structured_outputs": json.dumps({"json": schema}),
    }


def test_logit_bias_is_refused_where_the_backend_cannot_use_it(vllm_scripted):
    """Triton's vLLM backend hands the JSON's string token ids to vLLM, which fails the request
    with no reason (the stand-in does the same): a 400 naming the field instead."""
    status, body = vllm_scripted.create({**user("Hi"), "logit_bias": {"5": -100}})
    assert status == 400 and body["error"]["param"] == "logit_bias", body
    assert body["error"]["type"] == "invalid_request_error"


# ---- usage --------------------------------------------------------------------------------------
def test_continuous_usage_stats(scripted, expect):
    message = user(script(chunks=["a", "b", "c"], prompt_tokens=4, interval_ms=5))
    request = {**message, "stream": True,
               "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    result = scripted.stream(request)
    usages = [c["usage"] for c in result.chunks]
    assert all(u is not None and u["prompt_tokens"] == expect.prompt_tokens(message["messages"], 4) for u in usages)
    completion_tokens = [u["completion_tokens"] for u in usages]
    assert completion_tokens == sorted(completion_tokens) and completion_tokens[-1] == 3
    assert result.chunks[-1]["choices"] == []


# ---- echo (vLLM) ---------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_echo_starts_the_answer_with_the_assistants_last_message(scripted, stream):
    """vLLM's chat `echo`: with the assistant's message last (continue_final_message), the
    answer starts with it; streamed, as its own chunk after the role chunk."""
    messages = [{"role": "user", "content": script(chunks=[" and", " more"])},
                {"role": "assistant", "content": "The start"}]
    request = {"messages": messages, "echo": True, "continue_final_message": True, "add_generation_prompt": False,
               "n": 2, "stream": stream}
    if stream:
        result = scripted.stream(request)
        assert result.error is None
        for index in (0, 1):
            deltas = [c["choices"][0]["delta"] for c in result.chunks if c["choices"] and c["choices"][0]["index"] == index]
            assert deltas[0] == {"role": "assistant", "content": ""} and deltas[1] == {"content": "The start"}
            assert "".join(d.get("content") or "" for d in deltas) == "The start and more"
    else:
        _, body = scripted.create(request)
        assert [c["message"]["content"] for c in body["choices"]] == ["The start and more"] * 2
    # With the user's message last there is nothing of the answer's role to echo.
    _, body = scripted.create({**user(script(chunks=["Hi"])), "echo": True})
    assert body["choices"][0]["message"]["content"] == "Hi"


# ---- request chat templates ------------------------------------------------------------------------
def test_request_chat_template_when_trusted(triton):
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    trusted = ChatClient(triton.http_url, "chat_scripted")
    _, body = trusted.create({**user(script(echo_request=True)), "chat_template": template})
    prompt = json.loads(body["choices"][0]["message"]["content"])["inputs"]["text_input"][0]
    assert prompt == "[user] " + script(echo_request=True) + "\n"
    untrusted = ChatClient(triton.http_url, "chat_scripted_bls")
    status, body = untrusted.create({**user("hi"), "chat_template": template})
    assert status == 400 and body["error"]["param"] == "chat_template"


# ---- on the engine: logprobs, structured outputs, stop strings, LoRA ----------------------------
def test_logprobs(tiny, tiny_model):
    _, body = tiny.create(greedy(8, logprobs=True, top_logprobs=3))
    ChatCompletion.model_validate(body)
    choice = body["choices"][0]
    entries = choice["logprobs"]["content"]
    assert len(entries) == body["usage"]["completion_tokens"] == 8
    for entry in entries:
        assert len(entry["top_logprobs"]) == 3
        # Greedy: the sampled token is the most likely one.
        assert entry["top_logprobs"][0]["token"] == entry["token"]
        assert entry["top_logprobs"][0]["logprob"] == pytest.approx(entry["logprob"])
        assert entry["logprob"] <= 0
    # The bytes of the tokens are exactly the text, multi-byte characters included (a
    # random model also emits byte sequences that are not UTF-8: both sides replace those).
    token_bytes = bytes(b for entry in entries for b in entry["bytes"])
    assert token_bytes.decode("utf-8", errors="replace") == choice["message"]["content"]
    streamed = tiny.stream(greedy(8, logprobs=True, top_logprobs=3, stream=True))
    streamed_entries = [e for c in streamed.chunks for ch in c["choices"] if ch["logprobs"] for e in ch["logprobs"]["content"]]
    assert [e["token"] for e in streamed_entries] == [e["token"] for e in entries]
    assert [e["logprob"] for e in streamed_entries] == pytest.approx([e["logprob"] for e in entries])


def test_logprobs_not_asked(tiny):
    _, body = tiny.create(greedy(4))
    assert body["choices"][0]["logprobs"] is None


SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["answer", "count"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("stream", [False, True])
def test_response_format_json_schema(tiny, stream):
    request = greedy(64, response_format={"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA}})
    if stream:
        text = tiny.stream({**request, "stream": True}).content
    else:
        text = tiny.create(request)[1]["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(text), SCHEMA)


def test_response_format_json_object(tiny):
    _, body = tiny.create(greedy(64, response_format={"type": "json_object"}, temperature=0))
    assert isinstance(json.loads(body["choices"][0]["message"]["content"]), dict)


def test_stop_string_ends_before_the_string(tiny):
    _, body = tiny.create(greedy(24, ignore_eos=True))
    text = body["choices"][0]["message"]["content"]
    stop = next(text[i : i + 3] for i in range(6, len(text) - 3) if text[i : i + 3].strip())
    _, stopped = tiny.create(greedy(24, ignore_eos=True, stop=[stop]))
    assert stopped["choices"][0]["message"]["content"] == text[: text.index(stop)]
    assert stopped["choices"][0]["finish_reason"] == "stop"


def test_lora_adapter_by_model_name(tiny):
    _, base = tiny.create({**greedy(12, ignore_eos=True), "model": "tiny-chat"})
    status, adapted = tiny.create({**greedy(12, ignore_eos=True), "model": "tiny-chat:tiny-lora"})
    assert status == 200
    assert adapted["model"] == "tiny-chat:tiny-lora"
    assert adapted["choices"][0]["message"]["content"] != base["choices"][0]["message"]["content"]
    status, missing = tiny.create({**greedy(4), "model": "tiny-chat:other"})
    assert missing["error"]["code"] == "model_not_found" and "other" in missing["error"]["message"]


# ---- Completions ---------------------------------------------------------------------------------
def test_completion_scripted(completions_scripted, tokenizer):
    prompt = "Say: " + script(chunks=["Hello", " world"], prompt_tokens=3)
    if completions_scripted.fmt == "vllm":  # the scripted counts
        prompt_tokens, completion_tokens = 3, 2
    else:  # real counts
        prompt_tokens = len(tokenizer(prompt).input_ids)
        completion_tokens = len(tokenizer("Hello world", add_special_tokens=False).input_ids)
    status, body = completions_scripted.create({"prompt": prompt})
    assert status == 200
    Completion.model_validate(body)
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    assert body["choices"][0]["text"] == "Hello world"
    assert body["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    _, echoed = completions_scripted.create({"prompt": prompt, "echo": True})
    assert echoed["choices"][0]["text"] == prompt + "Hello world"
    result = completions_scripted.stream({"prompt": prompt, "stream": True, "echo": True, "n": 2,
                                          "stream_options": {"include_usage": True}})
    for index, events in by_choice(result.chunks).items():
        assert "".join(e["text"] for e in events) == prompt + "Hello world"
        assert [e["finish_reason"] for e in events if e["finish_reason"]] == ["stop"]
    assert result.chunks[-1]["usage"]["completion_tokens"] == 2 * completion_tokens


@pytest.mark.parametrize(
    ("fields", "param"),
    [({"prompt": ["a", "b"]}, "prompt"), ({"prompt": "x", "suffix": "y"}, "suffix"), ({}, "prompt"),
     ({"prompt": "x", "logprobs": 6}, "logprobs")],
)
def test_completion_errors(completions_scripted, fields, param):
    status, body = completions_scripted.create(fields)
    assert status == 400 and body["error"]["param"] == param


def test_completion_on_the_engine(completions, tiny_model):
    from transformers import AutoTokenizer

    request = {"prompt": "The river", "max_tokens": 10, "temperature": 0, "ignore_eos": True}
    _, body = completions.create({**request, "logprobs": 2})
    Completion.model_validate(body)
    text = body["choices"][0]["text"]
    assert body["choices"][0]["finish_reason"] == "length"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert body["usage"]["prompt_tokens"] == len(tokenizer("The river").input_ids)
    logprobs = body["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == len(logprobs["text_offset"]) == 10
    assert all(1 <= len(top) <= 3 for top in logprobs["top_logprobs"])
    assert "".join(logprobs["tokens"]).replace("\ufffd", "") == text.replace("\ufffd", "")
    streamed = completions.stream({**request, "stream": True})
    assert "".join(c["choices"][0]["text"] for c in streamed.chunks if c["choices"]) == text
