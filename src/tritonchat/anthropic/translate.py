"""An Anthropic Messages request as the chat pipeline plans it: a Chat Completions request.

    system                      a system message first (text blocks as text parts)
    user text / image blocks    a user message (images as data URLs, or http(s) URLs for the allow-list)
    user tool_result blocks     a tool message each, in place (`is_error`: the content starts with "Error: ")
    assistant text / thinking   an assistant message with content and reasoning (the template's
        / tool_use blocks       `reasoning_content`) and tool_calls (arguments: the input as JSON)
    a final assistant message   continued (`continue_final_message`), as Anthropic's prefill
    max_tokens, stop_sequences, temperature, top_p, top_k, stream     the chat fields of the same meaning
    tools / tool_choice         functions; auto, any (required), tool (named), none;
                                disable_parallel_tool_use is parallel_tool_calls false
    thinking                    the template's `enable_thinking` and `thinking` (Qwen3, GLM, DeepSeek-V3.1,
                                Granite): true when enabled or adaptive, false when disabled
"""

from __future__ import annotations

import json
from typing import Any, Literal

from ..protocol import ChatCompletionRequest
from ..protocol.anthropic import (
    CountTokensRequest,
    ImageBlock,
    Message,
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)


class MessagesChatRequest(ChatCompletionRequest):
    """The chat request of a Messages request, with what only the Anthropic answer needs."""

    counting: bool = False  # count_tokens: render and count, do not generate
    thinking: Literal["enabled", "disabled", "adaptive"] | None = None


def chat_request(request: CountTokensRequest) -> MessagesChatRequest:
    """The chat request that plans `request` (already valid, so this one is too)."""
    counting = not isinstance(request, MessagesRequest)
    messages: list[dict] = []
    if request.system:
        messages.append({"role": "system", "content": _parts(request.system)})
    final = request.messages[-1]
    prefill = final.role == "assistant" and not final.empty  # an empty one asks for nothing more
    for message in request.messages[: None if prefill or final.role == "user" else -1]:
        messages += _convert(message)
    chat: dict[str, Any] = {"model": request.model, "messages": messages, "counting": counting}
    if prefill and not messages[-1].get("tool_calls"):
        chat.update(continue_final_message=True, add_generation_prompt=False)
    if request.tools:
        chat["tools"] = [{"type": "function", "function": _function(tool)} for tool in request.tools]
        chat.update(_tool_choice(request, counting))
    if request.thinking is not None:
        on = request.thinking.type != "disabled"
        chat.update(thinking=request.thinking.type, chat_template_kwargs={"enable_thinking": on, "thinking": on})
    if isinstance(request, MessagesRequest):
        chat.update(max_tokens=request.max_tokens, stop=request.stop_sequences, temperature=request.temperature,
                    top_p=request.top_p, top_k=request.top_k, stream=request.stream)
    return MessagesChatRequest.model_validate({k: v for k, v in chat.items() if v is not None})


def _function(tool) -> dict:
    function = {"name": tool.name, "description": tool.description, "parameters": tool.input_schema,
                "strict": tool.strict}
    return {key: value for key, value in function.items() if value is not None}


def _tool_choice(request: CountTokensRequest, counting: bool) -> dict:
    choice = request.tool_choice
    if counting:  # only what reaches the template counts: the tools, whatever the choice
        return {"tool_choice": "none"}
    if choice is None:
        return {}
    fields: dict[str, Any] = {"tool_choice": {"auto": "auto", "any": "required", "none": "none"}.get(choice.type)}
    if choice.type == "tool":
        fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    if choice.disable_parallel_tool_use and choice.type != "none":
        fields["parallel_tool_calls"] = False
    return fields


def _parts(content: str | list[TextBlock]) -> str | list[dict]:
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": block.text} for block in content]


def _convert(message: Message) -> list[dict]:
    """One Anthropic message as chat messages (a user message with tool results is several)."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "assistant":
        return [_assistant(message.content)]
    out: list[dict] = []
    parts: list[dict] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            if parts:
                out.append({"role": "user", "content": parts})
                parts = []
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": _result(block)})
        elif isinstance(block, ImageBlock):
            parts.append({"type": "image_url", "image_url": {"url": block.url}})
        else:
            parts.append({"type": "text", "text": block.text})
    if parts:
        out.append({"role": "user", "content": parts})
    return out


def _result(block: ToolResultBlock) -> str:
    content = block.content
    text = content if isinstance(content, str) else "\n".join(part.text for part in content or [])
    return "Error: " + text if block.is_error else text


def _assistant(blocks: list) -> dict:
    texts = [{"type": "text", "text": block.text} for block in blocks if isinstance(block, TextBlock)]
    reasoning = [block.thinking for block in blocks if isinstance(block, ThinkingBlock)]
    calls = [{"id": block.id, "type": "function",
              "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}}
             for block in blocks if isinstance(block, ToolUseBlock)]
    message: dict[str, Any] = {"role": "assistant", "content": texts or (None if calls else "")}
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message
