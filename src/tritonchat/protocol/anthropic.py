"""Anthropic's Messages API: the request (`POST /v1/messages`, `/v1/messages/count_tokens`),
validated strictly, and Anthropic's error objects.

Unlike the OpenAI requests, an Anthropic request is refused with a 400 for any field Anthropic's
API does not know ("Extra inputs are not permitted", as Anthropic answers), and for the fields it
knows that this server does not carry out (naming them). Errors are
`{"type": "error", "error": {"type", "message"}}` with Anthropic's statuses (`ERROR_STATUSES`);
`anthropic_error` turns the package's OpenAI errors into them.

The request tensor's JSON is the request body; a `count_tokens` request carries
`"endpoint": "count_tokens"` besides (the gateway adds it on `/v1/messages/count_tokens`).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import BadRequestError, OpenAIError

# Anthropic's error types and their HTTP statuses.
ERROR_STATUSES = {
    "invalid_request_error": 400, "authentication_error": 401, "permission_error": 403, "not_found_error": 404,
    "request_too_large": 413, "rate_limit_error": 429, "api_error": 500, "overloaded_error": 529,
}
# HTTP statuses (the package's, errors.py, and those the gateway answers itself) as Anthropic's error
# types: an unavailable or full generation model (503) is Anthropic's 529; anything else an `api_error`.
KINDS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
         413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


def error_body(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_status(body: dict) -> int:
    """The HTTP status of an Anthropic error object (500 for anything else)."""
    error = body.get("error") if isinstance(body, dict) else None
    return ERROR_STATUSES.get(error.get("type") if isinstance(error, dict) else None, 500)


class AnthropicError(OpenAIError):
    """An error as Anthropic sends it. `status` stays the package's (it sets the Triton code: a
    529 travels as UNAVAILABLE); `http_status` is Anthropic's."""

    def __init__(self, message: str, kind: str, status: int):
        super().__init__(message, param=None, code=None)
        self.error_type = kind
        self.status = status

    @property
    def http_status(self) -> int:
        return ERROR_STATUSES.get(self.error_type, 500)

    def to_dict(self) -> dict:
        return error_body(self.error_type, self.message)


def anthropic_error(error: OpenAIError) -> AnthropicError:
    """`error` as Anthropic shapes it: a 400 is an `invalid_request_error`, an unknown model a
    `not_found_error`, an unavailable or overloaded generation model an `overloaded_error` (529),
    a failure an `api_error`."""
    if isinstance(error, AnthropicError):
        return error
    return AnthropicError(error.message, KINDS.get(error.status, "api_error"), error.status)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


CacheControl = dict[str, Any] | None  # accepted on every block and tool; prompt caching is the engine's own


class TextBlock(_Strict):
    type: Literal["text"]
    text: Annotated[str, Field(min_length=1)]
    cache_control: CacheControl = None
    citations: Annotated[list[Any], Field(max_length=0)] | None = None


class Base64Source(_Strict):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class UrlSource(_Strict):
    type: Literal["url"]
    url: str


class ImageBlock(_Strict):
    type: Literal["image"]
    source: Annotated[Union[Base64Source, UrlSource], Field(discriminator="type")]
    cache_control: CacheControl = None

    @property
    def url(self) -> str:
        """The image as the chat pipeline takes it: a data URL, or the http(s) URL."""
        source = self.source
        return source.url if isinstance(source, UrlSource) else f"data:{source.media_type};base64,{source.data}"


class ToolUseBlock(_Strict):
    type: Literal["tool_use"]
    id: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]+$")]
    name: Annotated[str, Field(min_length=1)]
    input: dict[str, Any]
    cache_control: CacheControl = None


class ToolResultBlock(_Strict):
    type: Literal["tool_result"]
    tool_use_id: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]+$")]
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None
    cache_control: CacheControl = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, content: Any) -> Any:
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "image" for b in content):
            raise ValueError("images in tool results are not supported by this server; send them in a user "
                             "message's content")
        return content


class ThinkingBlock(_Strict):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Strict):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[Union[TextBlock, ImageBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock],
                  Field(discriminator="type")]
BLOCKS = {"user": ("text", "image", "tool_result"), "assistant": ("text", "tool_use", "thinking", "redacted_thinking")}


class Message(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[Block]

    @model_validator(mode="after")
    def _blocks_of_the_role(self) -> Message:
        if isinstance(self.content, str) or not self.content:
            return self
        for block in self.content:
            if block.type not in BLOCKS[self.role]:
                raise ValueError(f"a {self.role} message cannot hold '{block.type}' blocks "
                                 f"(it may hold {', '.join(BLOCKS[self.role])})")
        return self

    @property
    def empty(self) -> bool:
        return not self.content


class Tool(_Strict):
    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    cache_control: CacheControl = None
    strict: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _custom_tools_only(cls, data: Any) -> Any:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind not in (None, "custom"):
            raise ValueError(f"server tools ('{kind}') are not supported by this server; define the tool with "
                             "'name', 'description' and 'input_schema'")
        return data

    @field_validator("input_schema")
    @classmethod
    def _an_object(cls, schema: dict) -> dict:
        if schema.get("type") != "object":
            raise ValueError("'type' must be 'object'")
        return schema


class ToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if (self.type == "tool") != (self.name is not None):
            raise ValueError("'name' is required with type 'tool', and only then")
        return self


class Thinking(_Strict):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[int, Field(ge=1024)] | None = None
    display: Literal["summarized", "omitted"] | None = None

    @model_validator(mode="after")
    def _budget(self) -> Thinking:
        if (self.type == "enabled") != (self.budget_tokens is not None):
            raise ValueError("'budget_tokens' is required with type 'enabled', and only then")
        return self


class Metadata(_Strict):
    user_id: str | None = None


# Fields of Anthropic's request this server does not carry out: accepted only when null.
UNSUPPORTED = {
    "container": "code-execution containers", "mcp_servers": "MCP servers", "context_management": "context management",
    "output_config": "structured outputs and effort", "output_format": "structured outputs",
    "inference_geo": "inference regions", "speed": "speed modes", "diagnostics": "diagnostics",
}


class CountTokensRequest(_Strict):
    """What `count_tokens` takes: the conversation and what reaches the chat template."""

    endpoint: Literal["messages", "count_tokens"] = "messages"
    model: Annotated[str, Field(min_length=1)]
    messages: Annotated[list[Message], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    cache_control: CacheControl = None

    @model_validator(mode="after")
    def _consistent(self) -> CountTokensRequest:
        for index, message in enumerate(self.messages):
            last = index == len(self.messages) - 1
            if message.empty and not (last and message.role == "assistant"):
                raise BadRequestError(f"messages.{index}: all messages must have non-empty content except for "
                                      "the optional final assistant message")
        final = self.messages[-1]
        if final.role == "assistant" and _text_of(final).endswith((" ", "\n", "\t")):
            raise BadRequestError("messages: final assistant content cannot end with trailing whitespace")
        names = [tool.name for tool in self.tools or []]
        if len(set(names)) != len(names):
            raise BadRequestError("tools: tool names must be unique")
        choice = self.tool_choice
        if choice is not None and choice.type in ("any", "tool") and not names:
            raise BadRequestError(f"tool_choice: type '{choice.type}' needs 'tools'")
        if choice is not None and choice.type == "tool" and choice.name not in names:
            raise BadRequestError(f"tool_choice.name: the tool {choice.name!r} is not in 'tools'")
        return self


class MessagesRequest(CountTokensRequest):
    """`POST /v1/messages`."""

    max_tokens: Annotated[int, Field(ge=1)]
    stop_sequences: Annotated[list[str], Field(max_length=16)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None  # vLLM takes (0, 1]
    top_k: Annotated[int, Field(ge=0)] | None = None
    stream: bool | None = None
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None  # accepted, no effect

    @field_validator("stop_sequences")
    @classmethod
    def _visible(cls, stops: list[str] | None) -> list[str] | None:
        if any(not stop.strip() for stop in stops or []):
            raise ValueError("each stop sequence must contain non-whitespace")
        return stops

    @model_validator(mode="after")
    def _thinking_budget(self) -> MessagesRequest:
        if self.thinking is not None and self.thinking.budget_tokens is not None \
                and self.thinking.budget_tokens >= self.max_tokens:
            raise BadRequestError("thinking.budget_tokens: must be less than max_tokens")
        return self


def _text_of(message: Message) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(block.text for block in message.content if isinstance(block, TextBlock))


def parse_messages_request(body: str | bytes) -> CountTokensRequest:
    """The request in a body: a `MessagesRequest`, or a `CountTokensRequest` for
    `"endpoint": "count_tokens"`; else a 400 with Anthropic's wording."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequestError(f"The request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequestError("The request body is nested too deeply.") from None
    if not isinstance(data, dict):
        raise BadRequestError("The request body must be a JSON object.")
    for name, what in UNSUPPORTED.items():
        if data.get(name) is not None:
            raise BadRequestError(f"{name}: this field is not supported by this server ({what})")
    model = CountTokensRequest if data.get("endpoint") == "count_tokens" else MessagesRequest
    try:
        return model.model_validate({k: v for k, v in data.items() if k not in UNSUPPORTED})
    except ValidationError as exc:
        raise validation_error(exc, data) from None
    except RecursionError:
        raise BadRequestError("The request body is nested too deeply.") from None


def _path(loc: tuple, data: Any, missing: bool) -> str:
    """pydantic's location as Anthropic writes it (`messages.0.content.1.text`): the steps that
    lead through the request itself, without pydantic's union-member names."""
    steps: list[str] = []
    for position, part in enumerate(loc):
        if isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            steps.append(str(part))
            data = data[part]
        elif isinstance(data, dict) and data.get("type") == part and position < len(loc) - 1:
            continue  # the tag of a block's (or a source's) kind, which pydantic puts in the location
        elif isinstance(data, dict) and part in data:
            steps.append(str(part))
            data = data[part]
        elif missing and position == len(loc) - 1:
            steps.append(str(part))
    return ".".join(steps)


def validation_error(exc: ValidationError, data: dict) -> BadRequestError:
    """One 400 for a pydantic failure: the deepest field under the first one that failed."""
    errors = [(err, _path(err["loc"], data, err["type"] == "missing")) for err in exc.errors(include_url=False)]
    first = errors[0][1]
    chosen = max((path for _, path in errors if path.startswith(first)), key=len)
    reasons = []
    for err, path in errors:
        if path != chosen:
            continue
        message = "Field required" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
        if err["type"] == "too_long" and chosen.endswith("citations"):
            message = "citations are not supported by this server"
        if message not in reasons:
            reasons.append(message)
    return BadRequestError(f"{chosen or 'request'}: {'; or '.join(reasons)}")

