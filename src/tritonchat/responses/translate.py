"""An OpenAI Responses request as the chat pipeline plans it: a Chat Completions request.

    instructions                 a system message first
    input (a string)             one user message
    input items, in order:
      message (user, system,     a message of that role; `input_text` parts as text parts,
        developer)                 `input_image` parts as image_url parts (data: or http(s) URLs)
      message (assistant),       one assistant turn, grouped as vLLM groups them: a reasoning item,
        reasoning, function_call   then text and calls, make one assistant message (its `reasoning`,
                                   content and tool_calls) until a part repeats
      function_call_output       a tool message (`tool_call_id` the call's `call_id`)
      a final assistant message  continued (`continue_final_message`) when its status is
        or reasoning item          `in_progress` or `incomplete`, as vLLM does
    max_output_tokens            max_completion_tokens
    temperature, top_p, stream, parallel_tool_calls, vLLM's sampling extras   the same fields
    tools, tool_choice           functions; none, auto, required, {"type": "function", "name"}
    text.format                  response_format (text, json_object, json_schema)
    reasoning.effort             the template's `reasoning_effort`, and `enable_thinking` (effort
                                 not "none") unless chat_template_kwargs sets it, as vLLM does

The fields a response echoes (instructions, tools, temperature, ...) travel with the chat
request (`response_fields`) to the event builder.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from ..protocol import ChatCompletionRequest, validation_error
from ..protocol.responses import ResponsesRequest
from ..protocol.responses_items import FunctionCallItem, FunctionCallOutput, InputImage, InputMessage, ReasoningItem


class ResponsesChatRequest(ChatCompletionRequest):
    """The chat request of a Responses request, with what only the Responses answer needs."""

    response_fields: dict[str, Any] = Field(default_factory=dict)


def chat_request(request: ResponsesRequest, passed: dict | None = None) -> ResponsesChatRequest:
    """The chat request that plans `request` (already valid); `passed`: vLLM's sampling extras."""
    messages: list[dict] = []
    if request.instructions:
        messages.append({"role": "system", "content": request.instructions})
    items = [InputMessage(role="user", content=request.input)] if isinstance(request.input, str) else request.input
    for item in items:
        _add(messages, item)
    for message in messages:
        if message["role"] == "assistant" and message.get("content") is None and not message.get("tool_calls"):
            message["content"] = ""  # a turn of reasoning alone
    chat: dict[str, Any] = {
        **(passed or {}), "model": request.model, "messages": messages, "stream": request.stream,
        "max_completion_tokens": request.max_output_tokens, "temperature": request.temperature,
        "top_p": request.top_p, "parallel_tool_calls": request.parallel_tool_calls,
        "response_fields": response_fields(request),
    }
    last = items[-1]
    if isinstance(last, (InputMessage, ReasoningItem)) and getattr(last, "role", "assistant") == "assistant" \
            and last.status in ("in_progress", "incomplete"):
        chat.update(continue_final_message=True, add_generation_prompt=False)
    if request.tools:
        chat["tools"] = [{"type": "function", "function": {k: v for k, v in tool.echo().items() if k != "type"
                                                           and v is not None}} for tool in request.tools]
        choice = request.tool_choice
        chat["tool_choice"] = {"type": "function", "function": {"name": choice.name}} if hasattr(choice, "name") \
            else choice
    elif request.tool_choice not in (None, "auto", "none"):  # OpenAI takes auto and none without tools
        chat["tool_choice"] = request.tool_choice if isinstance(request.tool_choice, str) else {
            "type": "function", "function": {"name": request.tool_choice.name}}
    if request.text is not None and request.text.format is not None:
        chat["response_format"] = _response_format(request.text.format)
    effort = request.reasoning.effort if request.reasoning is not None else None
    kwargs = dict(request.chat_template_kwargs or {})
    if effort is not None:
        kwargs = {"reasoning_effort": effort, "enable_thinking": effort != "none", **kwargs}
    if kwargs:
        chat["chat_template_kwargs"] = kwargs
    try:
        return ResponsesChatRequest.model_validate({k: v for k, v in chat.items() if v is not None})
    except ValidationError as exc:
        raise validation_error(exc) from None  # named in chat's terms; the service renames them


def _response_format(text_format) -> dict:
    if text_format.type != "json_schema":
        return {"type": text_format.type}
    schema = {"name": text_format.name, "schema": text_format.schema_, "description": text_format.description,
              "strict": text_format.strict}
    return {"type": "json_schema", "json_schema": {k: v for k, v in schema.items() if v is not None}}


def _add(messages: list[dict], item) -> None:
    """`item` as chat messages: a new message, or a part of the assistant message before it."""
    previous = messages[-1] if messages and messages[-1]["role"] == "assistant" else None
    if isinstance(item, FunctionCallOutput):
        messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
    elif isinstance(item, FunctionCallItem):
        call = {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}}
        if previous is not None:
            previous.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif isinstance(item, ReasoningItem):
        if previous is not None and "reasoning" not in previous:
            previous["reasoning"] = item.text()
        else:
            messages.append({"role": "assistant", "content": None, "reasoning": item.text()})
    elif item.role == "assistant":
        if previous is not None and previous.get("content") is None:
            previous["content"] = item.text()
        else:
            messages.append({"role": "assistant", "content": item.text()})
    else:
        messages.append({"role": item.role, "content": _content(item.content)})


def _content(content) -> str | list[dict]:
    if isinstance(content, str):
        return content
    return [{"type": "image_url", "image_url": {"url": part.image_url}} if isinstance(part, InputImage)
            else {"type": "text", "text": part.text} for part in content]


def response_fields(request: ResponsesRequest) -> dict[str, Any]:
    """What a response echoes of its request, in OpenAI's order and with OpenAI's defaults."""
    text_format = request.text.format.model_dump(by_alias=True, exclude_none=True) \
        if request.text is not None and request.text.format is not None else {"type": "text"}
    reasoning = request.reasoning
    choice = request.tool_choice
    return {
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": None,
        "prompt_cache_key": request.prompt_cache_key,
        "reasoning": {"effort": reasoning.effort if reasoning else None,
                      "summary": (reasoning.summary or reasoning.generate_summary) if reasoning else None},
        "safety_identifier": request.safety_identifier,
        "service_tier": "default",
        "store": False,
        "temperature": request.temperature if request.temperature is not None else 1.0,
        "text": {"format": text_format, "verbosity": "medium"},
        "tool_choice": choice.model_dump() if hasattr(choice, "model_dump") else (choice or "auto"),
        "tools": [tool.echo() for tool in request.tools or []],
        "top_logprobs": 0,
        "top_p": request.top_p if request.top_p is not None else 1.0,
        "truncation": "disabled",
        "user": request.user,
        "metadata": request.metadata or {},
    }
