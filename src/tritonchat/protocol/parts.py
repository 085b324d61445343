"""The building blocks of OpenAI requests: messages, tools, response formats, stream options.

Strict pydantic models (a string is not a number); unknown keys are ignored.
"""

from __future__ import annotations

import json

from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


Content = Union[str, list[TextPart]]


class ImageURL(_Strict):
    url: str
    # OpenAI's resolution hint; accepted and not used (vLLM ignores it too).
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Strict):
    type: Literal["image_url"]
    image_url: ImageURL


# User messages may also carry images (other part types, such as `input_audio` or `file`: 400).
UserPart = Annotated[Union[TextPart, ImagePart], Field(discriminator="type")]
UserContent = Union[str, list[UserPart]]
PART_TYPES = ("text", "image_url")


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
    content: UserContent
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


def json_schema_from_text(text: str) -> dict:
    """A JSON schema given as a string (vLLM accepts both), or ValueError."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON schema: an object, or a string holding one")
    return value


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("a regular expression must not contain a NUL character")
    return text


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("a grammar must not be empty or only whitespace")
    return text


# What vLLM refuses of a constraint before compiling it (SamplingParams._validate_structured_outputs).
# Whether a regex or grammar compiles is for the engine's grammar backend to say.
Regex = Annotated[str, Field(min_length=1), AfterValidator(_no_nul)]
Grammar = Annotated[str, Field(min_length=1), AfterValidator(_not_blank)]
# How deep objects and arrays may nest in a JSON schema constraint, the outermost counted
# (vLLM's MAX_STRUCTURED_OUTPUT_JSON_NESTING; OpenAI allows 10).
MAX_SCHEMA_NESTING = 64


def json_nesting(value: Any, limit: int = MAX_SCHEMA_NESTING) -> int:
    """How many levels of objects and arrays `value` nests (1 for a flat object), counted
    no further than `limit` + 1."""
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 0
    while level and depth <= limit:
        depth += 1
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, (dict, list))]
    return depth


class StructuredOutputs(_Strict):
    """vLLM's `structured_outputs`: exactly one constraint (other keys of vLLM's, such as
    `whitespace_pattern` or `structural_tag`, are refused)."""

    model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)

    json_: dict[str, Any] | str | None = Field(None, alias="json")
    regex: Regex | None = None
    choice: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    grammar: Grammar | None = None
    json_object: bool | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> StructuredOutputs:
        given = [name for name in ("json_", "regex", "choice", "grammar", "json_object") if getattr(self, name)]
        if len(given) != 1:
            raise ValueError("exactly one of 'json', 'regex', 'choice', 'grammar' or 'json_object' is required")
        if isinstance(self.json_, str):
            self.json_ = json_schema_from_text(self.json_)
        return self

    def constraint(self) -> dict:
        """As vLLM's StructuredOutputsParams / GuidedDecodingParams take it."""
        if self.json_object:
            return {"json_object": True}
        name = next(n for n in ("json_", "regex", "choice", "grammar") if getattr(self, n))
        value = getattr(self, name)
        name = name.rstrip("_")
        return {name: value}


class StreamOptions(_Strict):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


Probability = Annotated[float, Field(ge=0.0, le=1.0)]
# vLLM takes top_p in (0, 1]: 0 would keep no token at all (OpenAI's own API accepts it).
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
PositiveInt = Annotated[int, Field(ge=1)]
