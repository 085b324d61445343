"""Request validation: strict types, OpenAI's ranges, errors that name the field."""

from __future__ import annotations

import json

import pytest

from tritonchat import errors
from tritonchat.errors import BadRequestError
from tritonchat.protocol import parse_chat_request, parse_completion_request


def body(**fields) -> str:
    return json.dumps({"messages": [{"role": "user", "content": "hi"}], **fields})


def error_for(raw: str) -> BadRequestError:
    with pytest.raises(BadRequestError) as info:
        parse_chat_request(raw)
    return info.value


def test_minimal_request():
    request = parse_chat_request(body())
    assert request.messages[0].role == "user"
    assert request.is_stream is False
    assert request.requested_max_tokens is None


def test_max_completion_tokens_wins_over_max_tokens():
    assert parse_chat_request(body(max_tokens=5, max_completion_tokens=9)).requested_max_tokens == 9
    assert parse_chat_request(body(max_tokens=5)).requested_max_tokens == 5


def test_every_role_and_content_shape():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": [{"type": "text", "text": "d"}]},
        {"role": "user", "content": "u", "name": "ann"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
        {"role": "assistant", "content": "done", "reasoning_content": "because"},
    ]
    request = parse_chat_request(json.dumps({"messages": messages}))
    assert [m.role for m in request.messages] == ["system", "developer", "user", "assistant", "tool", "assistant"]


def test_unknown_fields_are_ignored():
    assert parse_chat_request(body(vendor_extra={"a": 1}, another=2)).messages


@pytest.mark.parametrize(
    ("raw", "param", "fragment"),
    [
        ("", None, "not valid JSON"),
        ("null", None, "JSON object"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": 2.5}), "temperature", "less than or equal to 2"),
        (body(top_p=1.5), "top_p", "less than or equal to 1"),
        (body(presence_penalty=-3), "presence_penalty", "greater than or equal to -2"),
        (body(seed=2**64), "seed", "less than or equal to"),
        (body(seed="1"), "seed", "valid integer"),
        (body(max_completion_tokens=1.5), "max_completion_tokens", "valid integer"),
        (body(stop=["a", 1]), "stop[1]", "valid string"),
        (body(stop=""), "stop", "empty"),
        (body(logit_bias={"abc": 1}), "logit_bias", "token ids"),
        (body(n=0), "n", "greater than or equal to 1"),
        (body(stream=1), "stream", "valid boolean"),
        (body(response_format={"type": "json_schema"}), "response_format", "json_schema"),
        (body(tool_choice="sometimes"), "tool_choice", "sometimes"),
        (json.dumps({"messages": [{"role": "assistant"}]}), "messages[0]", "content"),
        (json.dumps({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}),
         "messages[0].content[0]", "input_audio"),
        (json.dumps({"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
         "messages[0].content[0].type", "image_url"),
        (json.dumps({"messages": [{"content": "x"}]}), "messages[0]", "role"),
    ],
)
def test_errors_name_the_field(raw, param, fragment):
    error = error_for(raw)
    assert error.status == 400
    assert error.param == param
    if fragment:
        assert fragment in error.message
    body = error.to_dict()["error"]
    assert set(body) == {"message", "type", "param", "code"} and body["type"] == "invalid_request_error"


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("fields", "param", "fragment"),
    [
        ({"top_logprobs": 2}, "top_logprobs", "requires 'logprobs'"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed when 'stream' is true"),
        ({"add_generation_prompt": True, "continue_final_message": True}, "continue_final_message", "both"),
        ({"continue_final_message": True}, "continue_final_message", "last message"),
        ({"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs", "'tools'"),
        ({"tools": []}, "tools", "must not be empty"),
        ({"tool_choice": "required"}, "tool_choice", "needs 'tools'"),
        ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice",
         "'other'"),
        ({"tools": [TOOL], "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format",
         "cannot be combined"),
    ],
)
def test_chat_cross_field_rules(fields, param, fragment):
    """Rules that tie fields together are validators of the request model: a 400 naming the field."""
    error = error_for(body(**fields))
    assert error.param == param and fragment in error.message


def test_chat_cross_field_rules_pass():
    request = parse_chat_request(body(n=4, logprobs=True, top_logprobs=2, tools=[TOOL], tool_choice="none", stream=True,
                                      stream_options={"include_usage": True, "continuous_usage_stats": True},
                                      response_format={"type": "json_object"}, chat_template="{{ 'x' }}"))
    assert request.effective_tool_choice == "none" and list(request.functions) == ["get_weather"]
    assert parse_chat_request(body(tools=[TOOL])).effective_tool_choice == "auto"
    assert parse_chat_request(body()).effective_tool_choice == "none"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": "x", "suffix": "y"}, "suffix"),
        ({"prompt": "x", "best_of": 3}, "best_of"),
        ({"prompt": "x", "echo": True, "logprobs": 1}, "echo"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_completion_rules(fields, param):
    with pytest.raises(BadRequestError) as info:
        parse_completion_request(json.dumps(fields))
    assert info.value.param == param


@pytest.mark.parametrize("error", [
    errors.BadRequestError("bad", param="messages"), errors.NotFoundError("no such model"),
    errors.UnavailableError("busy"), errors.InternalError("broke"), errors.CancelledError("gone")])
def test_an_error_objects_status_reads_back_from_the_one_table(error):
    assert errors.status_of(error.to_dict()["error"]) == error.status


def test_an_unknown_error_object_reads_as_500():
    assert errors.status_of({"type": "weird", "code": None}) == 500
