"""Anthropic Messages requests: every field translated into the chat request that plans it,
every refusal with Anthropic's error, and the service that prepares them on the chat pipeline
(the same prompt as the equivalent chat request, count_tokens, this server's policy)."""

from __future__ import annotations

import json

import pytest

from tritonchat.anthropic import AnthropicService
from tritonchat.anthropic.translate import chat_request
from tritonchat.errors import BadRequestError, CancelledError, InternalError, NotFoundError, UnavailableError
from tritonchat.protocol.anthropic import (
    AnthropicError,
    anthropic_error,
    error_body,
    error_status,
    parse_messages_request,
)
from tritonchat.service import ChatService
from tritonchat.settings import Settings

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
TOOL = {"name": "get_weather", "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def body(**fields) -> dict:
    return {"model": "tiny", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}], **fields}


def translated(**fields):
    return chat_request(parse_messages_request(json.dumps(body(**fields))))


def test_every_field_reaches_the_chat_request():
    conversation = [
        {"role": "user", "content": [{"type": "text", "text": "Look", "cache_control": {"type": "ephemeral"}},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": PNG}}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Hm.", "signature": "sig"},
                                          {"type": "redacted_thinking", "data": "opaque"},
                                          {"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
                                      "content": [{"type": "text", "text": "no"}, {"type": "text", "text": "such"}]},
                                     {"type": "text", "text": "And now?"}]},
    ]
    chat = translated(messages=conversation, system=[{"type": "text", "text": "Be brief."}], tools=[TOOL],
                      tool_choice={"type": "auto", "disable_parallel_tool_use": True}, stop_sequences=["END"],
                      temperature=0.5, top_p=0.9, top_k=40, stream=True, metadata={"user_id": "u1"},
                      thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=2048,
                      service_tier="auto", cache_control={"type": "ephemeral"})
    dumped = chat.model_dump(exclude_none=True)
    assert dumped["messages"] == [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Look"},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."}], "reasoning_content": "Hm.",
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "content": "Sunny", "tool_call_id": "toolu_1"},
        {"role": "tool", "content": "Error: no\nsuch", "tool_call_id": "toolu_2"},
        {"role": "user", "content": [{"type": "text", "text": "And now?"}]},
    ]
    assert dumped["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city", "parameters": TOOL["input_schema"]}}]
    assert (chat.tool_choice, chat.parallel_tool_calls) == ("auto", False)
    assert (chat.max_tokens, chat.stop, chat.temperature, chat.top_p, chat.top_k, chat.stream) == (
        2048, ["END"], 0.5, 0.9, 40, True)
    assert chat.chat_template_kwargs == {"enable_thinking": True, "thinking": True} and chat.thinking == "enabled"
    assert not chat.counting and chat.max_completion_tokens is None


@pytest.mark.parametrize(("choice", "expected", "parallel"), [
    ({"type": "auto"}, "auto", None),
    ({"type": "any"}, "required", None),
    ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
    ({"type": "tool", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}, None),
    ({"type": "none", "disable_parallel_tool_use": True}, "none", None),
    (None, None, None),  # the chat default with tools: auto
])
def test_tool_choice(choice, expected, parallel):
    chat = translated(tools=[TOOL], **({"tool_choice": choice} if choice else {}))
    got = chat.tool_choice.model_dump() if hasattr(chat.tool_choice, "model_dump") else chat.tool_choice
    assert got == expected and chat.parallel_tool_calls is parallel
    assert chat.effective_tool_choice == (chat.tool_choice or "auto")


def test_thinking_disabled_and_adaptive_reach_the_template():
    assert translated(thinking={"type": "disabled"}).chat_template_kwargs == {"enable_thinking": False, "thinking": False}
    assert translated(thinking={"type": "adaptive"}).chat_template_kwargs == {"enable_thinking": True, "thinking": True}
    assert translated().chat_template_kwargs is None


def test_a_final_assistant_message_is_continued_and_an_empty_one_dropped():
    prefill = translated(messages=[{"role": "user", "content": "Name a river"}, {"role": "assistant", "content": "The"}])
    assert prefill.continue_final_message and prefill.add_generation_prompt is False
    assert prefill.messages[-1].content == "The"
    empty = translated(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": []}])
    assert len(empty.messages) == 1 and not empty.continue_final_message


def test_count_tokens_requests():
    request = parse_messages_request(json.dumps({"endpoint": "count_tokens", "model": "tiny", "tools": [TOOL],
                                                 "tool_choice": {"type": "any"}, "messages": body()["messages"]}))
    chat = chat_request(request)
    assert chat.counting and chat.tool_choice == "none" and chat.tools  # the tools are rendered, never parsed


@pytest.mark.parametrize(("change", "message"), [
    ({"max_tokens": None}, "max_tokens: Field required"),
    ({"model": None}, "model: Field required"),
    ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
    ({"max_tokens": "5"}, "max_tokens: Input should be a valid integer"),
    ({"foo": 1}, "foo: Extra inputs are not permitted"),
    ({"messages": []}, "messages: List should have at least 1 item"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role: Input should be 'user' or 'assistant'"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages.0.content.0: Input tag 'document' found"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "x": 1}]}]},
     "messages.0.content.0.x: Extra inputs are not permitted"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]},
     "a user message cannot hold 'tool_use' blocks"),
    ({"messages": [{"role": "user", "content": ""}]}, "messages.0: all messages must have non-empty content"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
     "messages.0.content.0.text: String should have at least 1 character"),
    ({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The "}]},
     "final assistant content cannot end with trailing whitespace"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "citations": [{}]}]}]},
     "messages.0.content.0.citations: citations are not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]}]},
     "images in tool results are not supported"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "bad id", "name": "f", "input": {}}]}]},
     "messages.0.content.0.id: String should match pattern"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]},
     "messages.0.content.0.source: Input tag 'file' found"),
    ({"temperature": 1.5}, "temperature: Input should be less than or equal to 1"),
    ({"top_p": 0}, "top_p: Input should be greater than 0"),
    ({"top_k": -1}, "top_k: Input should be greater than or equal to 0"),
    ({"stream": "yes"}, "stream: Input should be a valid boolean"),
    ({"stop_sequences": [" "]}, "stop_sequences: each stop sequence must contain non-whitespace"),
    ({"stop_sequences": ["x"] * 17}, "stop_sequences: List should have at most 16 items"),
    ({"metadata": {"user_id": "u", "team": "t"}}, "metadata.team: Extra inputs are not permitted"),
    ({"tools": [{**TOOL, "type": "web_search_20250305"}]}, "server tools ('web_search_20250305') are not supported"),
    ({"tools": [{**TOOL, "input_schema": {"type": "string"}}]}, "tools.0.input_schema: 'type' must be 'object'"),
    ({"tools": [{**TOOL, "name": "get weather"}]}, "tools.0.name: String should match pattern"),
    ({"tools": [TOOL, TOOL]}, "tools: tool names must be unique"),
    ({"tool_choice": {"type": "any"}}, "tool_choice: type 'any' needs 'tools'"),
    ({"tools": [TOOL], "tool_choice": {"type": "tool"}}, "'name' is required with type 'tool'"),
    ({"tools": [TOOL], "tool_choice": {"type": "tool", "name": "f"}}, "the tool 'f' is not in 'tools'"),
    ({"tools": [TOOL], "tool_choice": {"type": "maybe"}}, "tool_choice.type: Input should be"),
    ({"thinking": {"type": "enabled"}}, "'budget_tokens' is required with type 'enabled'"),
    ({"thinking": {"type": "enabled", "budget_tokens": 100}}, "budget_tokens: Input should be greater than or equal"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking.budget_tokens: must be less than max_tokens"),
    ({"thinking": {"type": "disabled", "budget_tokens": 2000}, "max_tokens": 4000}, "only then"),
    ({"container": "c1"}, "container: this field is not supported by this server"),
    ({"output_config": {"effort": "low"}}, "output_config: this field is not supported"),
    ({"endpoint": "complete"}, "endpoint: Input should be 'messages' or 'count_tokens'"),
])
def test_refusals_name_the_field_in_anthropics_words(change, message):
    request = {k: v for k, v in {**body(), **change}.items() if v is not None}
    with pytest.raises(BadRequestError) as info:
        chat_request(parse_messages_request(json.dumps(request)))
    assert message in info.value.message
    assert anthropic_error(info.value).to_dict() == error_body("invalid_request_error", info.value.message)


@pytest.mark.parametrize("raw", ["{", "[]", '"x"', b"\xff"])
def test_bodies_that_are_no_request(raw):
    with pytest.raises(BadRequestError, match="JSON"):
        parse_messages_request(raw)


def test_count_tokens_takes_no_generation_fields():
    with pytest.raises(BadRequestError, match="max_tokens: Extra inputs are not permitted"):
        parse_messages_request(json.dumps({**body(), "endpoint": "count_tokens"}))


@pytest.mark.parametrize(("error", "kind", "http", "status"), [
    (BadRequestError("bad"), "invalid_request_error", 400, 400),
    (NotFoundError("no such model"), "not_found_error", 404, 404),
    (UnavailableError("busy"), "overloaded_error", 529, 503),  # status: the Triton code stays UNAVAILABLE
    (InternalError("boom"), "api_error", 500, 500),
    (CancelledError("gone"), "api_error", 500, 499),
])
def test_errors_in_anthropics_shape(error, kind, http, status):
    shaped = anthropic_error(error)
    assert isinstance(shaped, AnthropicError) and anthropic_error(shaped) is shaped
    assert json.loads(shaped.to_json()) == {"type": "error", "error": {"type": kind, "message": error.message}}
    assert (shaped.http_status, shaped.status) == (http, status)
    assert error_status(shaped.to_dict()) == http
    assert error_status({"error": {"type": "something"}}) == 500 and error_status({}) == 500


# ---- the service -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def settings(tiny_model) -> Settings:
    return Settings.from_parameters({"tokenizer": str(tiny_model), "served_model_name": "tiny",
                                     "tool_call_parser": "hermes", "reasoning_parser": "qwen3"}, None)


@pytest.fixture(scope="module")
def service(settings, tokenizer) -> AnthropicService:
    return AnthropicService(settings, tokenizer)


def test_the_prompt_is_the_chat_requests_prompt(service, settings, tokenizer):
    """The design: an Anthropic request is planned as the chat request it translates to."""
    messages = [{"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                   "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]}]
    ours = service.prepare(json.dumps(body(system="Be brief.", messages=messages, tools=[TOOL], max_tokens=7)), "r1")
    chat = ChatService(settings, tokenizer).prepare(json.dumps({
        "messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                     {"role": "user", "content": "Weather in Oslo?"},
                     {"role": "assistant", "content": None, "tool_calls": [{"id": "toolu_1", "type": "function",
                      "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                     {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                    "parameters": TOOL["input_schema"]}}],
        "max_tokens": 7}))
    assert ours.prompt == chat.prompt and "<tool_response>\nSunny\n</tool_response>" in ours.prompt.text
    assert ours.builder.completion_id == "msg_r1" and ours.builder.model == "tiny"
    assert json.loads(ours.calls[0].inputs["sampling_parameters"][0]) == {"max_tokens": 7}


def test_stop_sequences_are_kept_in_the_text_for_the_builder(service):
    prepared = service.prepare(json.dumps(body(stop_sequences=["END", "STOP"], temperature=0, top_k=5)))
    sampling = json.loads(prepared.calls[0].inputs["sampling_parameters"][0])
    assert sampling == {"max_tokens": 16, "temperature": 0.0, "top_k": 5, "stop": ["END", "STOP"],
                        "include_stop_str_in_output": True}
    assert prepared.builder._stops.stops == ["END", "STOP"]


def test_count_tokens_is_answered_from_the_rendered_prompt(service, tokenizer):
    staged = service.stage(json.dumps({"endpoint": "count_tokens", "model": "tiny", "system": "Be brief.",
                                       "messages": [{"role": "user", "content": "Hi"}]}))
    text = tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                                         add_generation_prompt=True, tokenize=False)[len(tokenizer.bos_token):]
    expected = len(tokenizer(text).input_ids)  # as the engine counts the prompt (its BOS once)
    assert json.loads(staged.answer) == {"input_tokens": expected} == {"input_tokens": staged.prompt.num_tokens}
    assert service.stage(json.dumps(body())).answer is None


def test_thinking_disabled_closes_the_think_block_in_the_prompt(service):
    prompt = service.prepare(json.dumps(body(thinking={"type": "disabled"}))).prompt.text
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize(("fields", "kind", "fragment"), [
    ({"model": "claude-3-opus"}, "not_found_error", "'claude-3-opus' does not exist"),
    ({"max_tokens": 5000}, "invalid_request_error", "maximum context length is 2048 tokens"),
])
def test_policy_errors_in_anthropics_shape(service, fields, kind, fragment):
    with pytest.raises(Exception) as info:
        service.prepare(json.dumps(body(**fields)))
    shaped = service.public_error(info.value)
    assert shaped.to_dict()["error"]["type"] == kind and fragment in shaped.message


def test_what_a_server_without_parsers_refuses(tiny_model, tokenizer):
    plain = AnthropicService(Settings.from_parameters({"tokenizer": str(tiny_model), "served_model_name": "tiny"},
                                                      None), tokenizer)
    with pytest.raises(BadRequestError, match="^thinking: .*reasoning_parser"):
        plain.prepare(json.dumps(body(thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=1100)))
    with pytest.raises(BadRequestError, match="^tool_choice: .*'any', 'tool' or 'none'"):
        plain.prepare(json.dumps(body(tools=[TOOL])))
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}, {"type": "none"}):
        plain.prepare(json.dumps(body(tools=[TOOL], tool_choice=choice)))
    assert plain.stage(json.dumps({"endpoint": "count_tokens", "model": "tiny", "tools": [TOOL],
                                   "thinking": {"type": "enabled", "budget_tokens": 1024},
                                   "messages": body()["messages"]})).answer


def test_tensorrt_llm_formats_cut_stop_sequences_themselves(tiny_model, tokenizer):
    """They refuse `include_stop_str_in_output` and do not say which stop string matched: the
    answer then ends the turn (`end_turn`), its stop sequence cut by the format."""
    trt = AnthropicService(Settings.from_parameters({"tokenizer": str(tiny_model), "served_model_name": "tiny",
                                                     "request_format": "tensorrt_llm", "max_model_len": "2048"},
                                                    None), tokenizer)
    prepared = trt.prepare(json.dumps(body(stop_sequences=["END"])))
    assert prepared.builder._stops.stops == [] and prepared.generations[0].sampling == {"stop": ["END"]}
