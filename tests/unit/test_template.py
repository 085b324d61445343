"""Prompt rendering with the served model's own chat template (the tiny model's)."""

from __future__ import annotations

import json

import pytest

from tritonchat.errors import BadRequestError
from tritonchat.protocol import parse_chat_request
from tritonchat.template import PromptRenderer, template_iterates_content


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return PromptRenderer(tokenizer)


def request(messages, **fields):
    return parse_chat_request(json.dumps({"messages": messages, **fields}))


def test_prompt_is_the_template_without_the_doubled_bos(renderer, tokenizer):
    messages = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}]
    prompt = renderer.render(request(messages))
    full = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert full.startswith(tokenizer.bos_token)
    assert prompt.text == full[len(tokenizer.bos_token):]
    ids = tokenizer(prompt.text).input_ids
    assert ids.count(tokenizer.bos_token_id) == 1, "the engine's tokenization has exactly one BOS"
    assert prompt.num_tokens == len(ids) == len(tokenizer(full, add_special_tokens=False).input_ids)
    assert prompt.token_ids == tuple(ids)


def test_tiny_template_takes_content_parts(renderer):
    assert renderer.content_format == "openai"


def test_text_parts_render_like_strings(renderer):
    as_parts = renderer.render(request([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]))
    as_string = renderer.render(request([{"role": "user", "content": "a\nb"}]))
    assert as_parts.text == as_string.text


def test_tool_history_passes_arguments_as_objects(renderer):
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "content": "-3 C", "tool_call_id": "c1"},
    ]
    rendered = renderer.messages(request(messages))
    assert rendered[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}
    text = renderer.render(request(messages)).text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in text
    assert "<tool_response>\n-3 C\n</tool_response>" in text


def test_reasoning_history(renderer):
    text = renderer.render(request([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": "think first"},
        {"role": "user", "content": "q2"},
    ])).text
    assert "<think>\nthink first\n</think>\n\na" in text


def test_chat_template_kwargs_reach_the_template(renderer):
    text = renderer.render(request([{"role": "user", "content": "q"}], chat_template_kwargs={"enable_thinking": False})).text
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_continue_final_message(renderer):
    text = renderer.render(request(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "The answer is"}],
        continue_final_message=True, add_generation_prompt=False)).text
    assert text.endswith("<|im_start|>assistant\nThe answer is")


@pytest.mark.parametrize("fields", [
    {"continue_final_message": True, "add_generation_prompt": True},
    {"continue_final_message": True},
])
def test_continue_final_message_mistakes(renderer, fields):
    with pytest.raises(BadRequestError):
        renderer.render(request([{"role": "user", "content": "q"}], **fields))


def test_reserved_template_kwargs_are_refused(renderer):
    with pytest.raises(BadRequestError, match="tools"):
        renderer.render(request([{"role": "user", "content": "q"}], chat_template_kwargs={"tools": []}))


def test_content_format_detection():
    assert template_iterates_content("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}")
    assert template_iterates_content("{% for m in messages %}{% for p in m.content %}{{ p }}{% endfor %}{% endfor %}")
    assert not template_iterates_content("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert template_iterates_content("{% set c = message.content %}{% for p in c %}{{ p }}{% endfor %}")
    assert not template_iterates_content("{% broken")
