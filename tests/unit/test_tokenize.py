"""vLLM's /tokenize and /detokenize as the chat and completions models answer them (a request
body with `endpoint`), from the model's tokenizer and template, without a generation."""

from __future__ import annotations

import json

import pytest

from tritonchat.errors import BadRequestError, NotFoundError
from tritonchat.service import ChatService, CompletionService
from tritonchat.settings import Settings

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there, 中文 🎉"}]


@pytest.fixture(scope="module")
def settings(tiny_model) -> Settings:
    return Settings.from_parameters({"tokenizer": str(tiny_model), "served_model_name": "tiny"}, None)


@pytest.fixture(scope="module", params=[ChatService, CompletionService])
def service(request, settings, tokenizer):
    return request.param(settings, tokenizer)


def answer(service, **body) -> dict:
    staged = service.stage(json.dumps(body))
    assert staged.answer is not None
    return json.loads(staged.answer)


def test_a_prompt_is_tokenized_as_the_tokenizer_does(service, tokenizer):
    text = "The river flows, 你好 🎉"
    result = answer(service, endpoint="tokenize", prompt=text, return_token_strs=True)
    ids = tokenizer(text).input_ids
    assert result == {"count": len(ids), "max_model_len": service.limits.context_length, "tokens": ids,
                      "token_strs": tokenizer.convert_ids_to_tokens(ids)}
    plain = answer(service, endpoint="tokenize", prompt=text, add_special_tokens=False)
    assert plain["tokens"] == tokenizer(text, add_special_tokens=False).input_ids and plain["token_strs"] is None


def test_messages_are_tokenized_as_the_engine_would_get_them(service, tokenizer):
    """The model's template, one BOS (as a generation of the same messages would send)."""
    result = answer(service, endpoint="tokenize", messages=MESSAGES)
    rendered = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    expected = tokenizer(rendered, add_special_tokens=False).input_ids
    assert result["tokens"] == expected and result["count"] == len(expected)
    assert expected.count(tokenizer.bos_token_id) == 1
    prepared = ChatService(service.settings, tokenizer).prepare(json.dumps({"messages": MESSAGES}))
    assert result["count"] == prepared.prompt.num_tokens
    without = answer(service, endpoint="tokenize", messages=MESSAGES, add_generation_prompt=False)
    assert without["count"] < result["count"]


def test_detokenize_is_the_tokenizers_decode(service, tokenizer):
    ids = tokenizer("The river flows, 你好").input_ids
    assert answer(service, endpoint="detokenize", tokens=ids) == {"prompt": tokenizer.decode(ids)}


@pytest.mark.parametrize(("body", "kind", "param"), [
    ({"endpoint": "tokenize", "prompt": "a", "messages": MESSAGES}, BadRequestError, "messages"),
    ({"endpoint": "tokenize"}, BadRequestError, "prompt"),
    ({"endpoint": "tokenize", "prompt": 3}, BadRequestError, "prompt"),
    ({"endpoint": "tokenize", "messages": [{"role": "wizard", "content": "x"}]}, BadRequestError, "messages[0]"),
    ({"endpoint": "detokenize", "tokens": [-1]}, BadRequestError, "tokens"),
    ({"endpoint": "detokenize", "tokens": [10**6]}, BadRequestError, "tokens"),
    ({"endpoint": "detokenize", "tokens": [1], "model": "other"}, NotFoundError, "model"),
    ({"endpoint": "tokenize", "messages": MESSAGES, "chat_template": "{{ 1 }}"}, BadRequestError, "chat_template"),
])
def test_refusals_name_the_field(service, body, kind, param):
    with pytest.raises(kind) as refused:
        service.stage(json.dumps(body))
    assert refused.value.param == param


def test_other_apis_do_not_answer_tokenize(settings, tokenizer):
    """The Anthropic and Responses models refuse the field as unknown instead."""
    from tritonchat.anthropic import AnthropicService  # noqa: PLC0415

    with pytest.raises(BadRequestError):
        AnthropicService(settings, tokenizer).stage(json.dumps({"endpoint": "tokenize", "prompt": "Hi"}))
