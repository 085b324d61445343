"""`openai_chat` (in front of vllm_model, and with its own engine) against vLLM's own OpenAI server, on
the same tiny model files, greedy.

The same conversations must give the same content, finish_reason and usage: that checks
the prompt (chat template, content parts, no doubled BOS), the token budget, stop strings
and the token counts end to end. Also /tokenize and /detokenize.
"""

from __future__ import annotations

import json

import pytest
import requests


pytestmark = [pytest.mark.integration, pytest.mark.models("openai_chat")]

CASES = {
    "system and user": {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there!"}]},
    "multi-turn": {
        "messages": [
            {"role": "user", "content": "Name a river."},
            {"role": "assistant", "content": "The Nile."},
            {"role": "user", "content": "And a mountain?"},
        ]
    },
    "text parts": {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]}]
    },
    "developer role": {"messages": [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hello"}]},
    "unicode": {"messages": [{"role": "user", "content": "  leading spaces, 中文, emoji 🎉"}]},
    "max tokens": {"messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 5},
    "ignore eos": {"messages": [{"role": "user", "content": "Go on."}], "max_tokens": 30, "ignore_eos": True},
    # vLLM's sampling extras, passed through Triton's vLLM backend.
    "allowed token ids": {"messages": [{"role": "user", "content": "Hi"}], "allowed_token_ids": [40, 41, 42, 43]},
    "bad words": {"messages": [{"role": "user", "content": "Hi there!"}], "bad_words": ["the", "and", "a"]},
    "special tokens kept": {"messages": [{"role": "user", "content": "Hi"}], "skip_special_tokens": False,
                            "spaces_between_special_tokens": False, "ignore_eos": True},
    # vLLM's constrained generation beyond response_format.
    "structured choice": {"messages": [{"role": "user", "content": "Yes or no?"}],
                          "structured_outputs": {"choice": ["yes", "no", "maybe"]}},
    "structured regex": {"messages": [{"role": "user", "content": "Letters?"}],
                         "structured_outputs": {"regex": "[a-e]{4}"}},
    "template kwargs": {"messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "low",
                        "documents": [{"title": "A", "text": "a"}]},
    # vLLM's chat echo: the answer starts with the assistant's unfinished message.
    "echo": {"messages": [{"role": "user", "content": "Name a river."}, {"role": "assistant", "content": "The"}],
             "echo": True, "continue_final_message": True, "add_generation_prompt": False},
}


def vllm_chat(url: str, request: dict) -> dict:
    response = requests.post(f"{url}/v1/chat/completions", json={"model": "tiny-chat", **request}, timeout=120)
    response.raise_for_status()
    return response.json()


@pytest.fixture(params=["openai_chat", "openai_chat_inprocess"])
def chat(triton, request):
    """`openai_chat` in front of vllm_model, and with its own engine on the same engine arguments."""
    from tests.helpers import ChatClient

    triton.load(request.param)
    return ChatClient(triton.http_url, request.param)


@pytest.mark.parametrize("case", list(CASES))
def test_same_answer_as_vllms_server(vllm_server, chat, case):
    request = {"temperature": 0, "max_tokens": 24, **CASES[case]}
    reference = vllm_chat(vllm_server, request)
    _, ours = chat.create(request)
    assert ours["choices"][0]["message"]["content"] == reference["choices"][0]["message"]["content"]
    assert ours["choices"][0]["finish_reason"] == reference["choices"][0]["finish_reason"]
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert ours["usage"][key] == reference["usage"][key], key


def test_same_stop_string_handling(vllm_server, chat):
    base = {"temperature": 0, "max_tokens": 24, "ignore_eos": True, **CASES["system and user"]}
    text = vllm_chat(vllm_server, base)["choices"][0]["message"]["content"]
    stop = next(text[i : i + 2] for i in range(5, len(text) - 2) if text[i : i + 2].strip())
    reference = vllm_chat(vllm_server, {**base, "stop": [stop]})
    _, ours = chat.create({**base, "stop": [stop]})
    assert ours["choices"][0]["message"]["content"] == reference["choices"][0]["message"]["content"]
    assert ours["choices"][0]["finish_reason"] == reference["choices"][0]["finish_reason"] == "stop"
    assert ours["usage"] == {k: reference["usage"][k] for k in ours["usage"]}
    # include_stop_str_in_output: the stop string stays in the text, as in vLLM.
    reference = vllm_chat(vllm_server, {**base, "stop": [stop], "include_stop_str_in_output": True})
    _, ours = chat.create({**base, "stop": [stop], "include_stop_str_in_output": True})
    assert ours["choices"][0]["message"]["content"] == reference["choices"][0]["message"]["content"]
    assert ours["choices"][0]["message"]["content"].endswith(stop)


def triton_answer(triton, body: dict) -> dict:
    r = requests.post(f"http://{triton.http_url}/v2/models/openai_chat/generate",
                      json={"request": json.dumps(body)}, timeout=60)
    assert r.status_code == 200, r.text
    return json.loads(r.json()["response"])


@pytest.mark.parametrize("body", [
    {"prompt": "The river flows, 你好 🎉", "return_token_strs": True},
    {"prompt": "The river flows", "add_special_tokens": False},
    {"messages": CASES["system and user"]["messages"]},
    {"messages": CASES["multi-turn"]["messages"], "add_generation_prompt": False, "return_token_strs": True},
], ids=["prompt", "prompt without special tokens", "messages", "messages without generation prompt"])
def test_same_tokens_as_vllms_tokenize(vllm_server, triton, body):
    """`openai_chat` answers vLLM's /tokenize (the gateway's route; here through Triton's
    `generate` with `endpoint`) as vLLM's own server does."""
    theirs = requests.post(f"{vllm_server}/tokenize", json={"model": "tiny-chat", **body}, timeout=60)
    theirs.raise_for_status()
    assert triton_answer(triton, {"endpoint": "tokenize", **body}) == theirs.json()


def test_same_text_as_vllms_detokenize(vllm_server, triton):
    tokens = triton_answer(triton, {"endpoint": "tokenize", "prompt": "The river flows, 你好 🎉"})["tokens"]
    theirs = requests.post(f"{vllm_server}/detokenize", json={"model": "tiny-chat", "tokens": tokens}, timeout=60)
    theirs.raise_for_status()
    assert triton_answer(triton, {"endpoint": "detokenize", "tokens": tokens}) == theirs.json()
