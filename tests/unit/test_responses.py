"""OpenAI Responses requests: every field translated into the chat request that plans it, every
refusal naming its field in OpenAI's error shape, every field of OpenAI's and vLLM's schemas
honoured or refused, and the service that prepares them on the chat pipeline (the same prompt as
the equivalent chat request, the chat pipeline's errors in the Responses request's terms)."""

from __future__ import annotations

import json
import typing

import pytest

from tests.unit.test_known_fields import _vllm_fields
from tritonchat.errors import BadRequestError, NotFoundError
from tritonchat.protocol.responses import IGNORED, PASSED, REFUSED, ResponsesRequest, parse_responses_request
from tritonchat.responses import ResponsesService
from tritonchat.responses.service import responses_error
from tritonchat.responses.translate import chat_request
from tritonchat.service import ChatService
from tritonchat.settings import Settings

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
TOOL = {"type": "function", "name": "get_weather", "description": "Weather of a city", "strict": True,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def body(**fields) -> dict:
    return {"model": "tiny", "input": "Hi", **fields}


def translated(**fields):
    return chat_request(*parse_responses_request(json.dumps(body(**fields))))


def test_every_field_reaches_the_chat_request():
    conversation = [
        {"role": "developer", "content": "Use metric units."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Look"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "low"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Hm."}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}', "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "Rain"}]},
        {"role": "user", "content": "And now?"},
    ]
    chat = translated(input=conversation, instructions="Be brief.", tools=[TOOL], tool_choice="auto",
                      parallel_tool_calls=False, max_output_tokens=64, temperature=0.5, top_p=0.9, stream=True,
                      text={"format": {"type": "json_object"}}, reasoning={"effort": "low", "summary": "auto"},
                      metadata={"k": "v"}, user="u1", store=True, service_tier="auto", include=[
                          "reasoning.encrypted_content"], truncation="disabled", max_tool_calls=3,
                      stream_options={"include_obfuscation": False}, prompt_cache_key="pk", top_k=40, seed=7,
                      stop=["END"], include_reasoning=False, chat_template_kwargs={"x": 1})
    dumped = chat.model_dump(exclude_none=True)
    assert dumped["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Use metric units."},
        {"role": "user", "content": [{"type": "text", "text": "Look"},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]},
        {"role": "assistant", "content": "Checking.", "reasoning": "Hm.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "content": "Sunny", "tool_call_id": "call_1"},
        {"role": "tool", "content": "Rain", "tool_call_id": "call_2"},
        {"role": "user", "content": "And now?"},
    ]
    assert dumped["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city", "parameters": TOOL["parameters"], "strict": True}}]
    assert (chat.tool_choice, chat.parallel_tool_calls, chat.max_completion_tokens) == ("auto", False, 64)
    assert (chat.temperature, chat.top_p, chat.stream, chat.top_k, chat.seed, chat.stop) == (
        0.5, 0.9, True, 40, 7, ["END"])
    assert chat.response_format.type == "json_object" and chat.include_reasoning is False
    assert chat.chat_template_kwargs == {"reasoning_effort": "low", "enable_thinking": True, "x": 1}
    fields = chat.response_fields
    assert (fields["instructions"], fields["metadata"], fields["user"], fields["max_output_tokens"]) == (
        "Be brief.", {"k": "v"}, "u1", 64)
    assert fields["tools"] == [TOOL] and fields["tool_choice"] == "auto" and fields["parallel_tool_calls"] is False
    assert fields["reasoning"] == {"effort": "low", "summary": "auto"} and fields["store"] is False
    assert fields["text"] == {"format": {"type": "json_object"}, "verbosity": "medium"}
    assert (fields["temperature"], fields["top_p"], fields["max_tool_calls"], fields["prompt_cache_key"]) == (
        0.5, 0.9, 3, "pk")


def test_defaults_echoed_as_openai_does():
    fields = translated().response_fields
    assert {k: fields[k] for k in ("temperature", "top_p", "tool_choice", "tools", "parallel_tool_calls",
                                   "truncation", "metadata", "text", "reasoning", "top_logprobs")} == {
        "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto", "tools": [], "parallel_tool_calls": True,
        "truncation": "disabled", "metadata": {}, "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "reasoning": {"effort": None, "summary": None}, "top_logprobs": 0}
    chat = translated()
    assert [m.model_dump(exclude_none=True) for m in chat.messages] == [{"role": "user", "content": "Hi"}]
    assert chat.tool_choice is None and chat.tools is None and chat.chat_template_kwargs is None


@pytest.mark.parametrize(("fields", "chat_choice", "echoed"), [
    ({"tools": [TOOL]}, None, "auto"),
    ({"tools": [TOOL], "tool_choice": "required"}, "required", "required"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "get_weather"}},
     {"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "name": "get_weather"}),
    ({"tools": [TOOL], "tool_choice": "none"}, "none", "none"),
    ({"tools": [], "tool_choice": "auto"}, None, "auto"),  # OpenAI takes auto and none without tools
    ({"tool_choice": "none"}, None, "none"),
])
def test_tool_choice(fields, chat_choice, echoed):
    chat = translated(**fields)
    got = chat.tool_choice.model_dump() if hasattr(chat.tool_choice, "model_dump") else chat.tool_choice
    assert got == chat_choice and chat.response_fields["tool_choice"] == echoed


def test_text_formats():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    chat = translated(text={"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}})
    assert chat.response_format.model_dump(by_alias=True, exclude_none=True) == {
        "type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": True}}
    assert chat.response_fields["text"]["format"] == {"type": "json_schema", "name": "thing", "schema": schema,
                                                      "strict": True}
    assert translated(text={"format": {"type": "text"}, "verbosity": "medium"}).response_format.type == "text"


def test_reasoning_effort_reaches_the_template_as_vllm_sends_it():
    assert translated(reasoning={"effort": "none"}).chat_template_kwargs == {"reasoning_effort": "none",
                                                                             "enable_thinking": False}
    assert translated(reasoning={"effort": "max"}, chat_template_kwargs={"enable_thinking": False}) \
        .chat_template_kwargs == {"reasoning_effort": "max", "enable_thinking": False}
    assert translated(reasoning={"summary": "auto"}).chat_template_kwargs is None


def test_a_partial_final_assistant_message_is_continued_as_vllm_does():
    partial = translated(input=[{"role": "user", "content": "Name a river"},
                                {"type": "message", "role": "assistant", "status": "incomplete",
                                 "content": [{"type": "output_text", "text": "The"}]}])
    assert partial.continue_final_message and partial.add_generation_prompt is False
    done = translated(input=[{"role": "user", "content": "Name a river"},
                             {"role": "assistant", "content": "The Nile."}])
    assert not done.continue_final_message and done.messages[-1].content == "The Nile."


def test_assistant_items_group_as_vllm_groups_them():
    """A reasoning item, then text and calls make one assistant message until a part repeats."""
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    chat = translated(input=[{"role": "user", "content": "Hi"}, call, {**call, "call_id": "c2"},
                             {"role": "assistant", "content": "After."}, {"role": "assistant", "content": "More."},
                             {"type": "reasoning", "summary": [{"type": "summary_text", "text": "S."}]}])
    messages = [m.model_dump(exclude_none=True) for m in chat.messages]
    assert [len(m.get("tool_calls", [])) for m in messages] == [0, 2, 0]
    assert messages[1]["content"] == "After." and messages[2] == {"role": "assistant", "content": "More.",
                                                                 "reasoning": "S."}
    alone = translated(input=[{"role": "user", "content": "Hi"}, {"type": "reasoning", "summary": [],
                                                                  "content": [{"type": "reasoning_text", "text": "R"}]}])
    assert alone.messages[-1].model_dump(exclude_none=True) == {"role": "assistant", "content": "", "reasoning": "R"}


@pytest.mark.parametrize(("change", "param", "fragment"), [
    ({"foo": 1}, "foo", "Unknown parameter: 'foo'."),
    ({"input": None}, "input", "this field is required"),
    ({"input": []}, "input", "at least 1 item"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type", "'web_search_call' are not supported"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "item references are not supported"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input[0].content[0].type", "file inputs are not supported"),
    ({"input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
     "input[0].content[0].type", "audio inputs are not supported"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
     "input[0].content[0]", "file ids are not supported"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text", "required"),
    ({"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]}, "input[0]",
     "a user message cannot hold 'output_text' parts"),
    ({"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0]",
     "a system message cannot hold 'input_image'"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "Input should be"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
     "input[0].arguments", "valid string"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "namespace": "ns"}]},
     "input[0].namespace", "namespaced tools are not supported"),
    ({"input": [{"type": "function_call_output", "call_id": "c",
                 "output": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].output", "only text"),
    ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}]}, "input[0].encrypted_content",
     "encrypted reasoning is not supported"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "'web_search' tools are not supported"),
    ({"tools": [{"type": "mcp", "server_label": "x"}]}, "tools[0].type", "'mcp' tools are not supported"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0].type", "'code_interpreter' tools"),
    ({"tools": [{"type": "custom", "name": "x"}]}, "tools[0].type", "'custom' tools"),
    ({"tools": [{**TOOL, "name": "get weather"}]}, "tools[0].name", "String should match pattern"),
    ({"tools": [{**TOOL, "defer_loading": True}]}, "tools[0].defer_loading", "Input should be False"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice", "'web_search_preview' is not supported"),
    ({"tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}, "tool_choice", "'allowed_tools'"),
    ({"tool_choice": "required"}, "tool_choice", "'tool_choice' needs 'tools'"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "f"}}, "tool_choice", "'f' in 'tool_choice'"),
    ({"max_output_tokens": 0}, "max_output_tokens", "greater than or equal to 1"),
    ({"max_output_tokens": "5"}, "max_output_tokens", "valid integer"),
    ({"temperature": 2.5}, "temperature", "less than or equal to 2"),
    ({"top_p": 0}, "top_p", "greater than 0"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format", "'name' and 'schema' are required"),
    ({"text": {"format": {"type": "xml"}}}, "text.format.type", "Input should be"),
    ({"text": {"verbosity": "low"}}, "text.verbosity", "Input should be 'medium'"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort", "Input should be"),
    ({"include": ["message.output_text.logprobs"]}, "include", "'message.output_text.logprobs' is not supported"),
    ({"include": ["file_search_call.results"]}, "include", "'file_search_call.results' is not supported"),
    ({"metadata": {"k": 1}}, "metadata.k", "valid string"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "at most 16 items"),
    ({"truncation": "auto"}, "truncation", "'auto' is not supported"),
    ({"previous_response_id": "resp_1"}, "previous_response_id", "stores no responses"),
    ({"conversation": "conv_1"}, "conversation", "stores no responses or conversations"),
    ({"background": True}, "background", "keeps none"),
    ({"top_logprobs": 5}, "top_logprobs", "log probabilities are not supported"),
    ({"prompt": {"id": "pmpt_1"}}, "prompt", "prompt templates"),
    ({"context_management": [{"type": "compaction"}]}, "context_management", "compaction"),
    ({"vllm_xargs": {"a": 1}}, "vllm_xargs", "not supported"),
    ({"top_k": "x"}, "top_k", "valid integer"),
])
def test_refusals_name_the_field(change, param, fragment):
    request = {k: v for k, v in {**body(), **change}.items() if v is not None}
    with pytest.raises(BadRequestError) as info:
        chat_request(*parse_responses_request(json.dumps(request)))
    error = responses_error(info.value)
    assert (error.param, error.status, error.error_type) == (param, 400, "invalid_request_error")
    assert fragment in error.message
    if param == "foo":
        assert error.code == "unknown_parameter"


@pytest.mark.parametrize("raw", ["{", "[]", '"x"', b"\xff"])
def test_bodies_that_are_no_request(raw):
    with pytest.raises(BadRequestError, match="JSON"):
        parse_responses_request(raw)


def test_no_op_values_are_accepted():
    translated(previous_response_id=None, background=False, truncation="disabled", top_logprobs=0, store=False,
               enable_response_messages=False, conversation=None, safety_identifier="s", request_id="r",
               prompt_cache_retention="24h", cache_salt="salt", priority=0)


def test_every_schema_field_is_honoured_or_refused():
    from openai.types.responses import response_create_params

    openai_fields = set(typing.get_type_hints(response_create_params.ResponseCreateParamsBase)) | {"stream"}
    vllm_fields = _vllm_fields("ResponsesRequest", "responses")
    assert "previous_input_messages" in vllm_fields and "conversation" in openai_fields
    handled = set(ResponsesRequest.model_fields) | set(PASSED) | set(REFUSED) | set(IGNORED)
    assert sorted((openai_fields | vllm_fields) - handled) == []


def test_chat_errors_in_the_responses_requests_terms():
    error = responses_error(BadRequestError("'max_completion_tokens' asks for 9 tokens; ... 'messages[0].content' ...",
                                            param="max_completion_tokens", code="context_length_exceeded"))
    assert (error.param, error.code) == ("max_output_tokens", "context_length_exceeded")
    assert error.message == "'max_output_tokens' asks for 9 tokens; ... 'input' ..." == str(error)
    assert responses_error(BadRequestError("x", param="response_format.json_schema")).param == "text.format.json_schema"
    assert responses_error(BadRequestError("x", param="messages[3].content")).param == "input"
    same = NotFoundError("no such model")
    assert responses_error(same) is same


# ---- the service -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def settings(tiny_model) -> Settings:
    return Settings.from_parameters({"tokenizer": str(tiny_model), "served_model_name": "tiny",
                                     "tool_call_parser": "hermes", "reasoning_parser": "qwen3"}, None)


@pytest.fixture(scope="module")
def service(settings, tokenizer) -> ResponsesService:
    return ResponsesService(settings, tokenizer)


def test_the_prompt_is_the_chat_requests_prompt(service, settings, tokenizer):
    """The design: a Responses request is planned as the chat request it translates to."""
    conversation = [{"role": "user", "content": "Weather in Oslo?"},
                    {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                     "arguments": '{"city": "Oslo"}'},
                    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"}]
    ours = service.prepare(json.dumps(body(instructions="Be brief.", input=conversation, tools=[TOOL],
                                           max_output_tokens=7)), "r1")
    chat = ChatService(settings, tokenizer).prepare(json.dumps({
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Weather in Oslo?"},
                     {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
                      "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}],
        "tools": [{"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}],
        "max_completion_tokens": 7}))
    assert ours.prompt == chat.prompt and "<tool_response>\nSunny\n</tool_response>" in ours.prompt.text
    assert ours.builder.completion_id == "resp_r1" and ours.builder.model == "tiny"
    assert json.loads(ours.calls[0].inputs["sampling_parameters"][0]) == {"max_tokens": 7}
    assert ours.builder.count_tokens("Hello world") == len(tokenizer("Hello world", add_special_tokens=False).input_ids)


def test_output_items_sent_back_reach_the_prompt(service):
    """A response's own output as the next request's input: reasoning, text and a call."""
    output = [{"id": "rs_1", "type": "reasoning", "status": "completed", "summary": [],
               "content": [{"type": "reasoning_text", "text": "Let me see."}]},
              {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Checking."}]},
              {"id": "fc_1", "type": "function_call", "status": "completed", "arguments": '{"city": "Oslo"}',
               "call_id": "call_1", "name": "get_weather"}]
    conversation = [{"role": "user", "content": "Weather?"}, *output,
                    {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"}]
    prompt = service.prepare(json.dumps(body(input=conversation, tools=[TOOL]))).prompt.text
    assert ("<|im_start|>assistant\n<think>\nLet me see.\n</think>\n\nChecking.\n<tool_call>\n"
            '{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>') in prompt


def test_reasoning_effort_none_closes_the_think_block_in_the_prompt(service):
    prompt = service.prepare(json.dumps(body(reasoning={"effort": "none"}))).prompt.text
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize(("fields", "param", "fragment"), [
    ({"model": "gpt-5"}, "model", "'gpt-5' does not exist"),
    ({"max_output_tokens": 5000}, "max_output_tokens", "maximum context length is 2048 tokens"),
    ({"input": "word " * 3000}, "input", "Please shorten the prompt"),
])
def test_policy_errors_name_the_responses_field(service, fields, param, fragment):
    with pytest.raises(Exception) as info:
        service.prepare(json.dumps(body(**fields)))
    shaped = service.public_error(info.value)
    assert shaped.param == param and fragment in shaped.message and "max_completion_tokens" not in shaped.message


def test_what_a_server_without_a_tool_parser_refuses(tiny_model, tokenizer):
    plain = ResponsesService(Settings.from_parameters({"tokenizer": str(tiny_model), "served_model_name": "tiny"},
                                                      None), tokenizer)
    with pytest.raises(BadRequestError) as info:
        plain.prepare(json.dumps(body(tools=[TOOL])))
    assert info.value.param == "tool_choice" and "tool_call_parser" in info.value.message
    for choice in ("required", {"type": "function", "name": "get_weather"}, "none"):
        plain.prepare(json.dumps(body(tools=[TOOL], tool_choice=choice)))
    with pytest.raises(BadRequestError) as info:  # vLLM's field, refused on the vLLM backend as in chat
        plain.prepare(json.dumps(body(logit_bias={"1": 2})))
    assert info.value.param == "logit_bias"
