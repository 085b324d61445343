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


# Templates of other shapes than the tiny model's: plain ChatML (string content, no tool
# support), one that refuses a system role, Mistral's (alternating roles only).
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
NO_SYSTEM = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\\n' }}{% endfor %}"
)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}"
)
TOOL_HISTORY = [
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
    {"role": "tool", "content": "12 C", "tool_call_id": "c1"},
]


def renderer_with(tokenizer, template: str, content_format: str = "auto") -> PromptRenderer:
    import copy  # noqa: PLC0415

    other = copy.deepcopy(tokenizer)
    other.chat_template = template
    return PromptRenderer(other, content_format)


def test_null_assistant_content_renders_as_empty_text_in_string_templates(tokenizer):
    """As vLLM does: a tool-calling turn without content is "" for templates that take strings
    (plain ChatML concatenates it and failed with a TypeError before)."""
    prompt = renderer_with(tokenizer, CHATML).render(request(TOOL_HISTORY))
    assert "<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n12 C<|im_end|>\n" in prompt.text
    assert prompt.text.endswith("<|im_start|>assistant\n")


def test_null_assistant_content_is_no_parts_in_part_templates(renderer):
    assert renderer.messages(request(TOOL_HISTORY))[1]["content"] == []


@pytest.mark.parametrize(
    ("template", "messages", "content_format", "fragment"),
    [
        (NO_SYSTEM, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "auto",
         "System role not supported"),
        (MISTRAL, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "auto",
         "Conversation roles must alternate"),
        (CHATML, [{"role": "user", "content": "Hi"}], "openai", "TypeError"),
    ],
    ids=["no-system-role", "alternating-roles", "parts-in-a-string-template"],
)
def test_a_template_that_cannot_render_the_conversation_is_a_400(tokenizer, template, messages, content_format,
                                                                  fragment):
    with pytest.raises(BadRequestError) as info:
        renderer_with(tokenizer, template, content_format).render(request(messages))
    assert info.value.status == 400 and info.value.param == "messages"
    assert fragment in info.value.message and "The chat template failed" in info.value.message


def test_mistral_template_renders_a_valid_conversation(tokenizer):
    prompt = renderer_with(tokenizer, MISTRAL).render(
        request([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}])
    )
    assert prompt.text == "[INST] a [/INST]b<|im_end|>[INST] c [/INST]"


# Llama 3.1's layout, shortened: headers per turn, the tools in the first user turn (its
# default), tool calls as JSON objects, tool results in the "ipython" role.
LLAMA3 = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system = messages[0]['content'] %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system + '<|eot_id|>' }}"
    "{%- if tools is not none and messages[0]['role'] == 'user' %}"
    "{%- set first = messages[0]['content'] %}{%- set messages = messages[1:] %}"
    "{{- '<|start_header_id|>user<|end_header_id|>\\n\\nFunctions:\\n' }}"
    "{%- for t in tools %}{{- t | tojson }}{{- '\\n' }}{%- endfor %}"
    "{{- first + '<|eot_id|>' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' and message.tool_calls %}"
    "{%- set call = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{{- '{\"name\": \"' + call.name + '\", \"parameters\": ' + (call.arguments | tojson) + '}' }}"
    "{{- '<|eot_id|>' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{%- else %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def test_llama3_template_renders_tools_history_and_one_bos(tokenizer):
    renderer = renderer_with(tokenizer, LLAMA3)
    assert renderer.content_format == "string"
    prompt = renderer.render(request([{"role": "system", "content": "Be brief."}, *TOOL_HISTORY], tools=[WEATHER_TOOL]))
    assert prompt.text == (
        "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nFunctions:\n"
        + json.dumps(WEATHER_TOOL) + "\nWeather in Oslo?<|eot_id|>"
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eot_id|>'
        "<|start_header_id|>ipython<|end_header_id|>\n\n12 C<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    ids = tokenizer(prompt.text).input_ids
    assert ids.count(tokenizer.bos_token_id) == 1 and prompt.token_ids == tuple(ids)


def test_llama3_template_without_tools_keeps_the_user_turn(tokenizer):
    text = renderer_with(tokenizer, LLAMA3).render(request([{"role": "user", "content": "Hi"}])).text
    assert text == ("<|start_header_id|>system<|end_header_id|>\n\n<|eot_id|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_a_remembered_tokenizer_class_gives_the_same_tokenizer(tmp_path, monkeypatch, tiny_model):
    """`load_tokenizer` remembers the class AutoTokenizer chose per directory; the next load
    (another process, another instance) builds that class directly, and the tokenizer is the
    same in everything the pipeline uses. A changed file makes it ask AutoTokenizer again."""
    import shutil  # noqa: PLC0415

    from tritonchat import template  # noqa: PLC0415

    monkeypatch.setenv("TRITONCHAT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    calls = []
    import transformers  # noqa: PLC0415

    original = transformers.AutoTokenizer.from_pretrained
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *args, **kwargs: calls.append(args) or original(*args, **kwargs))
    first = template.load_tokenizer(str(model))
    second = template.load_tokenizer(str(model))
    assert len(calls) == 1 and type(second) is type(first)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there, 中文 🎉"}]
    for tokenizer in (first, second):
        assert tokenizer("Hello world", add_special_tokens=True).input_ids == first("Hello world").input_ids
    assert second.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        first.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert (second.bos_token, second.eos_token, second.eos_token_id, second.all_special_tokens) == \
        (first.bos_token, first.eos_token, first.eos_token_id, first.all_special_tokens)
    assert second.decode(first("Hello world").input_ids) == first.decode(first("Hello world").input_ids)
    config = model / "tokenizer_config.json"
    config.write_text(config.read_text() + "\n")
    template.load_tokenizer(str(model))
    assert len(calls) == 2
