"""The Triton-free service: a request body in, a prepared request (prompt, per-choice calls,
decoders, response builder) out, or an OpenAI error from the one policy check."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tritonchat.errors import BadRequestError, NotFoundError
from tritonchat.service import ChatService, CompletionService
from tritonchat.settings import Settings


@pytest.fixture(scope="module")
def settings(tiny_model) -> Settings:
    return Settings.from_parameters({"tokenizer": str(tiny_model), "served_model_name": "tiny"}, None)


@pytest.fixture(scope="module")
def chat(settings, tokenizer) -> ChatService:
    return ChatService(settings, tokenizer)


def body(**fields) -> str:
    return json.dumps({"messages": [{"role": "user", "content": "Hi"}], **fields})


def test_a_chat_request_is_prepared(chat, tokenizer):
    prepared = chat.prepare(body(n=2, seed=3, stream=True, max_completion_tokens=5), "r7")
    assert prepared.stream and prepared.builder.completion_id == "chatcmpl-r7"
    assert prepared.prompt.text == tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False)[len(tokenizer.bos_token):]
    assert [call.request_id for call in prepared.calls] == ["r7.0", "r7.1"]
    sampling = [json.loads(call.inputs["sampling_parameters"][0]) for call in prepared.calls]
    assert [s["seed"] for s in sampling] == [3, 4] and all(s["max_tokens"] == 5 for s in sampling)
    assert len(prepared.decoders) == 2 and prepared.decoders[0] is not prepared.decoders[1]
    assert "finish_reason" in prepared.calls[0].outputs


def test_a_completion_request_is_prepared(settings, tokenizer):
    prepared = CompletionService(settings, tokenizer).prepare(json.dumps({"prompt": "Once", "max_tokens": 3}))
    assert prepared.prompt.text == "Once" and prepared.builder.completion_id.startswith("cmpl-")
    assert prepared.calls[0].inputs["text_input"][0] == b"Once"


@pytest.mark.parametrize(
    ("fields", "kind", "param", "fragment"),
    [
        ({"model": "gpt-4o"}, NotFoundError, "model", "'gpt-4o'"),
        ({"chat_template": "{{ 'x' }}"}, BadRequestError, "chat_template", "trust_request_chat_template"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, BadRequestError, "tool_choice",
         "tool_call_parser"),
        ({"n": 17}, BadRequestError, "n", "max_n"),
        ({"logit_bias": {str(i): 1.0 for i in range(301)}}, BadRequestError, "logit_bias", "max_logit_bias"),
        ({"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)], "tool_choice": "none"},
         BadRequestError, "tools", "max_tools"),
    ],
)
def test_the_policy_check_refuses_what_this_server_does_not_allow(chat, fields, kind, param, fragment):
    with pytest.raises(kind) as info:
        chat.prepare(body(**fields))
    assert info.value.param == param and fragment in info.value.message


@pytest.mark.parametrize(
    ("overrides", "request_body", "param", "cap"),
    [
        ({"max_messages": 2}, json.dumps({"messages": [{"role": "user", "content": "x"}] * 3}), "messages",
         "max_messages"),
        ({"max_content_chars": 10}, body(messages=[{"role": "user", "content": "x" * 11}]), "messages",
         "max_content_chars"),
        ({"max_completion_tokens_limit": 100}, body(max_completion_tokens=101), "max_completion_tokens",
         "max_completion_tokens_limit"),
        ({"max_completion_tokens_limit": 100}, body(max_tokens=101), "max_tokens", "max_completion_tokens_limit"),
        ({"max_request_bytes": 100}, body(user="x" * 100), None, "max_request_bytes"),
    ],
)
def test_caps_are_400s_that_name_the_cap(settings, tokenizer, overrides, request_body, param, cap):
    service = ChatService(replace(settings, **overrides), tokenizer)
    with pytest.raises(BadRequestError) as info:
        service.prepare(request_body)
    assert info.value.param == param and f"({cap})" in info.value.message


def test_target_format_refusals_come_from_the_policy_check(settings, tokenizer):
    service = ChatService(replace(settings, request_format="trtllm"), tokenizer)
    with pytest.raises(BadRequestError) as info:
        service.prepare(body(min_p=0.1))
    assert info.value.param == "min_p"


def test_what_tool_choice_adds_is_checked_against_the_target_too(settings, tokenizer):
    """A named tool_choice constrains generation; a target without constrained generation
    refuses it as it refuses response_format."""
    service = ChatService(replace(settings, request_format="llmapi"), tokenizer)
    named = {"type": "function", "function": {"name": "f"}}
    with pytest.raises(BadRequestError) as info:
        service.prepare(body(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice=named))
    assert info.value.param == "response_format" and "tool_choice" in str(info.value)


def test_a_parser_that_needs_special_tokens_refuses_an_ensemble_that_drops_them(settings, tokenizer):
    """NVIDIA's postprocessing drops special tokens by default, so Mistral's [TOOL_CALLS] never
    reaches the parser: refused at load, with what to change."""
    mistral = replace(settings, request_format="trtllm", tool_call_parser="mistral")
    with pytest.raises(ValueError, match="skip_special_tokens"):
        ChatService(mistral, tokenizer)
    ChatService(replace(mistral, trtllm_skip_special_tokens=False), tokenizer)
    ChatService(replace(mistral, request_format="tensorrt_llm"), tokenizer)
    ChatService(replace(mistral, tool_call_parser="hermes"), tokenizer)
    with pytest.raises(ValueError, match="LLM API"):  # it has no input to keep them
        ChatService(replace(mistral, request_format="llmapi"), tokenizer)
    # Harmony's channel markers (gpt-oss's reasoning parser) are special tokens too.
    with pytest.raises(ValueError, match="reasoning_parser 'openai_gptoss'"):
        ChatService(replace(settings, request_format="trtllm", reasoning_parser="openai_gptoss"), tokenizer)


def test_a_trusted_request_template_still_renders_in_a_sandbox(settings, tokenizer):
    service = ChatService(replace(settings, trust_request_chat_template=True), tokenizer)
    assert service.prepare(body(chat_template="{{ messages[0]['content'] }}")).prompt.text == "Hi"
    for escape in ("{{ messages.__class__.__mro__ }}", "{{ ''.__class__.__base__.__subclasses__() }}",
                   "{{ raise_exception.__globals__ }}"):
        with pytest.raises(BadRequestError) as info:
            service.prepare(body(chat_template=escape))
        assert info.value.param == "chat_template" and "reaches for '__" in info.value.message


def test_error_messages_repeat_at_most_a_short_piece_of_the_input(chat):
    with pytest.raises(BadRequestError) as info:
        chat.prepare(body(tool_choice="x" * 10_000))
    assert len(info.value.message) < 300


@pytest.mark.parametrize("server, fields, expected", [
    (1, {"stream": True}, 1),
    (1, {"stream": True, "stream_interval": 4}, 4),
    (3, {"stream": True}, 3),
    (3, {"stream": True, "stream_interval": 2}, 3),  # a request can raise the server's interval, not lower it
    (3, {"stream": True, "stream_interval": 8}, 8),
    (3, {"stream_interval": 8}, 1),  # ignored without stream, as vLLM does
])
def test_stream_interval_is_the_larger_of_the_servers_and_the_requests(settings, tokenizer, server, fields, expected):
    service = ChatService(replace(settings, stream_interval=server), tokenizer)
    assert service.prepare(body(**fields)).stream_interval == expected


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_a_bad_stream_interval_is_a_400_naming_it(chat, value):
    with pytest.raises(BadRequestError) as caught:
        chat.prepare(body(stream=True, stream_interval=value))
    assert caught.value.param == "stream_interval"


def test_the_stream_interval_parameter_must_be_at_least_one(tiny_model):
    from tritonchat.settings import ConfigError  # noqa: PLC0415

    with pytest.raises(ConfigError, match="stream_interval"):
        Settings.from_parameters({"tokenizer": str(tiny_model), "stream_interval": "0"}, None)


def test_completions_default_to_16_tokens_and_chat_to_what_fits(settings, tokenizer):
    """OpenAI's and vLLM's defaults: a Completions request without max_tokens gets 16; a chat
    request without a budget gets the rest of the context; `default_max_tokens` overrides both."""
    completion = CompletionService(settings, tokenizer).prepare(json.dumps({"prompt": "Once upon a time"}))
    assert completion.generations[0].max_tokens == 16
    whole = ChatService(settings, tokenizer).prepare(body())
    assert whole.generations[0].max_tokens > 16
    assert whole.generations[0].max_tokens + whole.prompt.num_tokens == ChatService(settings, tokenizer).limits.context_length
    configured = replace(settings, default_max_tokens=40)
    assert CompletionService(configured, tokenizer).prepare(json.dumps({"prompt": "Once"})).generations[0].max_tokens == 40
    assert ChatService(configured, tokenizer).prepare(body()).generations[0].max_tokens == 40
