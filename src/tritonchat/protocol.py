"""The OpenAI Chat Completions request, validated strictly (pydantic v2).

Types are strict (a string is not a number, a float is not an integer), ranges follow
OpenAI's documented limits, and every message names the offending field. Fields OpenAI
clients may add that this server does not know are ignored (and logged at debug level),
as with OpenAI-compatible servers; known fields with bad values are a 400.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import BadRequestError

log = logging.getLogger(__name__)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


Content = Union[str, list[TextPart]]


class FunctionCall(_Strict):
    name: str
    arguments: str


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(_Strict):
    role: Literal["system"]
    content: Content
    name: str | None = None


class DeveloperMessage(_Strict):
    role: Literal["developer"]
    content: Content
    name: str | None = None


class UserMessage(_Strict):
    role: Literal["user"]
    content: Content
    name: str | None = None


class AssistantMessage(_Strict):
    role: Literal["assistant"]
    content: Content | None = None
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None

    @model_validator(mode="after")
    def _has_something(self) -> AssistantMessage:
        if self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs 'content' or 'tool_calls'")
        return self


class ToolMessage(_Strict):
    role: Literal["tool"]
    content: Content
    tool_call_id: str


Message = Annotated[
    Union[SystemMessage, DeveloperMessage, UserMessage, AssistantMessage, ToolMessage],
    Field(discriminator="role"),
]
ROLES = ("system", "developer", "user", "assistant", "tool")


class FunctionDefinition(_Strict):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Strict):
    name: Annotated[str, Field(min_length=1, max_length=64)]
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("'json_schema' is required when type is 'json_schema'")
        return self


class StreamOptions(_Strict):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
PositiveInt = Annotated[int, Field(ge=1)]


class _GenerationFields(_Strict):
    """Fields chat completions and completions share."""

    model: str | None = None
    max_tokens: PositiveInt | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    min_p: Probability | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, le=2.0)] | None = None
    seed: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] | None = None
    stop: str | Annotated[list[str], Field(max_length=16)] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = None
    min_tokens: Annotated[int, Field(ge=0)] | None = None
    ignore_eos: bool | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = None
    n: Annotated[int, Field(ge=1, le=128)] | None = None
    response_format: ResponseFormat | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None

    # Accepted because clients send them; they do not change generation.
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_not_empty(cls, value):
        stops = [value] if isinstance(value, str) else (value or [])
        if any(s == "" for s in stops):
            raise ValueError("stop sequences must not be empty strings")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, value):
        for key in value or {}:
            if not key.lstrip("-").isdigit():
                raise ValueError(f"keys must be token ids, got {key!r}")
        return value

    @property
    def is_stream(self) -> bool:
        return bool(self.stream)

    @property
    def choices(self) -> int:
        return self.n or 1

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.continuous_usage_stats)


class ChatCompletionRequest(_GenerationFields):
    """Every field of OpenAI's Chat Completions request, plus the usual vLLM extras."""

    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: PositiveInt | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None

    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None

    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @property
    def requested_max_tokens(self) -> int | None:
        """`max_completion_tokens` wins over the deprecated `max_tokens`."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def top_logprobs_count(self) -> int | None:
        """How many alternatives per token; None when no log probabilities were asked for."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_GenerationFields):
    """OpenAI's (legacy) Completions request."""

    prompt: str | list[Any]
    suffix: str | None = None
    echo: bool | None = None
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    best_of: Annotated[int, Field(ge=1, le=20)] | None = None

    @property
    def top_logprobs_count(self) -> int | None:
        return self.logprobs


def parse_request(body: str | bytes, model: type[_GenerationFields]):
    """Parse and validate a JSON request body, or raise `BadRequestError` naming the field."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequestError(f"The request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequestError("The request body must be a JSON object.")
    try:
        request = model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    if log.isEnabledFor(logging.DEBUG):
        unknown = sorted(set(data) - set(model.model_fields))
        if unknown:
            log.debug("ignoring unknown request fields: %s", ", ".join(unknown))
    return request


def parse_chat_request(body: str | bytes) -> ChatCompletionRequest:
    return parse_request(body, ChatCompletionRequest)


def parse_completion_request(body: str | bytes) -> CompletionRequest:
    return parse_request(body, CompletionRequest)


_UNION_MEMBER_NAMES = {"str", "int", "float", "bool", "none", "dict", "list"}


def _param_path(loc: tuple) -> str:
    """('messages', 0, 'user', 'content') -> 'messages[0].content'.

    pydantic puts union member names (a discriminator tag like 'user', or a type like
    'list[TextPart]') into the location; they are not part of the client's field path.
    """
    path = ""
    previous = None
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif (
            "[" in part
            or part in _UNION_MEMBER_NAMES
            or part.startswith(("function-", "literal["))
            or (isinstance(previous, int) and part in ROLES)
            or part[:1].isupper()
        ):
            pass
        else:
            path += f".{part}" if path else part
        previous = part
    return path


def validation_error(exc: ValidationError) -> BadRequestError:
    """One 400 for a pydantic failure, naming the most specific field that failed."""
    errors = [(err, _param_path(err["loc"])) for err in exc.errors(include_url=False)]
    first = errors[0][1]
    # A union reports one error per member; the deepest path under the first one is the
    # member the client most likely meant (e.g. content[0].type rather than content).
    chosen = max((p for _, p in errors if p.startswith(first)), key=len)
    reasons = []
    for err, path in errors:
        if path != chosen:
            continue
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "this field is required"
        elif err["type"] == "literal_error":
            msg = f"{msg}, got {err['input']!r}"
        if msg not in reasons:
            reasons.append(msg)
    where = chosen or "request"
    return BadRequestError(f"Invalid value for '{where}': {'; or '.join(reasons)}.", param=chosen or None)
