"""OpenAI's Responses API: the request of `POST /v1/responses`, validated strictly.

Every top-level field is declared here, passed on under its Chat Completions name (vLLM's
sampling extras, which both requests share: `top_k`, `seed`, `stop`, ...), accepted without
effect (`IGNORED`), or refused with a 400 naming it unless it is at its no-op value (`REFUSED`);
anything else is OpenAI's "Unknown parameter" 400. Inside `input`, items and content parts of a
kind this server cannot carry out (built-in tools' calls, files, audio, stored item references)
are refused by name (`responses_items.py` holds the items, tools and formats).

What depends on this server (the model name, its parsers, the context length) is checked by the
chat pipeline the request is translated into (`tritonchat.responses.translate`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator

from ..errors import BadRequestError
from . import known
from .parts import TopP
from .requests import UINT64_MAX
from .responses_items import (
    UNSUPPORTED_PARTS,
    FunctionTool,
    Item,
    NamedFunction,
    Reasoning,
    StreamOptions,
    TextConfig,
    _Item,
    item_kind,
)

# `include` values this server carries out (here: the reasoning is returned in the clear in
# `content`, and no encrypted_content is made, so there is nothing more to include).
INCLUDABLE = ("reasoning.encrypted_content",)
Metadata = Annotated[dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]],
                     Field(max_length=16)]


class ResponsesRequest(_Item):
    """`POST /v1/responses`, the fields this server reads itself."""

    model: str | None = None
    input: str | Annotated[list[Item], Field(min_length=1)]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: Annotated[int, Field(ge=1, le=UINT64_MAX)] | None = None
    max_tool_calls: Annotated[int, Field(ge=1)] | None = None  # no built-in tools run here: always honoured
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: TopP | None = None
    text: TextConfig | None = None
    reasoning: Reasoning | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    include: list[str] | None = None
    metadata: Metadata | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    # Accepted whatever their value (see docs/api.md): nothing is stored here, whatever `store` says.
    store: bool | None = None
    service_tier: str | None = None
    truncation: Literal["disabled"] | None = None
    # vLLM's, not OpenAI's: merged into the chat template's arguments with what `reasoning` sets.
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("include")
    @classmethod
    def _includable(cls, values: list[str] | None) -> list[str] | None:
        for value in values or []:
            if value not in INCLUDABLE:
                raise ValueError(f"{value!r} is not supported by this server (it supports {', '.join(INCLUDABLE)})")
        return values

    @field_validator("tools", mode="before")
    @classmethod
    def _functions_only(cls, tools: Any) -> Any:
        for index, tool in enumerate(tools if isinstance(tools, list) else []):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind != "function":
                raise BadRequestError(
                    f"tools[{index}]: {kind!r} tools are not supported by this server: it runs no built-in tools (web "
                    "search, file search, code interpreter, computer use, image generation, MCP, ...); define "
                    "functions ('type': 'function') and run them yourself.", param=f"tools[{index}].type")
        return tools

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _a_function_choice(cls, choice: Any) -> Any:
        if isinstance(choice, dict) and choice.get("type") != "function":
            raise BadRequestError(
                f"tool_choice: {choice.get('type')!r} is not supported by this server; use 'none', 'auto', 'required' "
                "or {'type': 'function', 'name': ...}.", param="tool_choice")
        return choice

    @field_validator("truncation", mode="before")
    @classmethod
    def _not_cut(cls, value: Any) -> Any:
        if value == "auto":
            raise BadRequestError(
                "truncation: 'auto' is not supported by this server: a conversation longer than the model's context "
                "is refused with a 400, never cut; use 'disabled' (the default) and shorten 'input'.",
                param="truncation")
        return value

    @field_validator("input", mode="before")
    @classmethod
    def _supported_items(cls, items: Any) -> Any:
        for index, item in enumerate(items if isinstance(items, list) else []):
            kind = item_kind(item)
            if kind == "item_reference":
                raise BadRequestError(f"input[{index}]: item references are not supported by this server (it "
                                      "stores no items); send the item itself.", param=f"input[{index}].type")
            if kind not in ("message", "function_call", "function_call_output", "reasoning"):
                raise BadRequestError(
                    f"input[{index}]: items of type {kind!r} are not supported by this server (it takes messages, "
                    "function_call, function_call_output and reasoning items; it runs no built-in tools).",
                    param=f"input[{index}].type")
            for part_index, part in enumerate(item.get("content") if isinstance(item, dict) and isinstance(
                    item.get("content"), list) else []):
                what = UNSUPPORTED_PARTS.get(part.get("type") if isinstance(part, dict) else None)
                if what:
                    raise BadRequestError(f"input[{index}].content[{part_index}]: {what} are not supported by "
                                          "this server.", param=f"input[{index}].content[{part_index}].type")
        return items


# Fields passed on to the chat request under the same name (vLLM's Responses extras, which
# its Chat Completions request shares; the chat request validates them).
PASSED = ("top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "stop",
          "stop_token_ids", "ignore_eos", "include_reasoning", "skip_special_tokens", "include_stop_str_in_output",
          "structured_outputs", "logit_bias")
NO_STORE = "this server stores no responses or conversations; send the whole conversation in 'input'"
# Fields of OpenAI's and vLLM's Responses requests that this server does not carry out, accepted
# only at their no-op value (known.py's rule format).
REFUSED: dict[str, known.Rule] = {
    "previous_response_id": ((), NO_STORE),
    "conversation": ((), NO_STORE),
    "background": ((False,), "background responses need a response store, and this server keeps none"),
    "top_logprobs": ((0,), "log probabilities are not supported on this endpoint"),
    "prompt": ((), "stored prompt templates are not supported"),
    "context_management": ((), "context management (compaction) is not supported"),
    "moderation": ((), "moderation is not supported"),
    "image": ((), "image generation is not supported"),
    "access_programs": ((), "access programs are not supported"),
    "background_options": ((), "background responses are not supported"),
    "enable_response_messages": ((False,), "raw response messages are not supported"),
    "previous_input_messages": ((), "previous input messages are not supported; send the conversation in 'input'"),
    **{name: known.CHAT[name] for name in ("watermarking", "vllm_xargs", "kv_transfer_params", "ec_transfer_params",
                                           "mm_payload", "return_mm_kwargs", "media_io_kwargs",
                                           "mm_processor_kwargs")},
}
IGNORED = known.IGNORED  # caching and routing hints, ids for the caller's own records


def parse_responses_request(body: str | bytes) -> tuple[ResponsesRequest, dict]:
    """The request in a body, and the fields passed on to the chat request (`PASSED`); else a 400."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequestError(f"The request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequestError("The request body is nested too deeply.") from None
    if not isinstance(data, dict):
        raise BadRequestError("The request body must be a JSON object.")
    declared = ResponsesRequest.model_fields
    for name in data:
        if name not in declared and name not in PASSED and name not in REFUSED and name not in IGNORED:
            raise BadRequestError(f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter")
    known.check_known(data, REFUSED, lambda name: name in declared)
    try:
        request = ResponsesRequest.model_validate({k: v for k, v in data.items() if k in declared})
    except ValidationError as exc:
        raise validation_error(exc, data) from None
    except RecursionError:
        raise BadRequestError("The request body is nested too deeply.") from None
    return request, {k: v for k, v in data.items() if k in PASSED}


def _path(loc: tuple, data: Any, missing: bool) -> str:
    """pydantic's location as OpenAI writes a param (`input[0].content[1].text`): the steps that
    lead through the request itself, without pydantic's union-member names."""
    path = ""
    for position, part in enumerate(loc):
        if isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            path += f"[{part}]"
            data = data[part]
        elif isinstance(data, dict) and part in data:
            path += f".{part}" if path else str(part)
            data = data[part]
        elif missing and position == len(loc) - 1:
            path += f".{part}" if path else str(part)
    return path


def validation_error(exc: ValidationError, data: dict) -> BadRequestError:
    """One 400 for a pydantic failure: the deepest field under the first one that failed."""
    errors = [(err, _path(err["loc"], data, err["type"] == "missing")) for err in exc.errors(include_url=False)]
    first = errors[0][1]
    chosen = max((path for _, path in errors if path.startswith(first)), key=len)
    reasons = []
    for err, path in errors:
        if path == chosen:
            message = "this field is required" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
            if message not in reasons:
                reasons.append(message)
    return BadRequestError(f"Invalid value for '{chosen or 'request'}': {'; or '.join(reasons)}.", param=chosen or None)
