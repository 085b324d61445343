"""The parts of an OpenAI Responses request (`protocol/responses.py`): input items and their
content parts, function tools, the text format, reasoning and stream options.

Strict types; unknown keys inside these are ignored, so that items a client got back from a
response (with their ids, statuses, annotations) can be sent again as they are. Kinds this server
cannot carry out are refused by name: file and audio parts, file ids, namespaced calls,
encrypted reasoning (the request refuses stored item references and built-in tools' items).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator


class _Item(BaseModel):
    """A part of the request: strict types, unknown keys ignored (see the module's docstring)."""

    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class InputText(_Item):
    type: Literal["input_text"]
    text: str


class InputImage(_Item):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high", "original"] | None = None  # accepted, no effect (as in vLLM)

    @model_validator(mode="after")
    def _a_url(self) -> InputImage:
        if self.file_id is not None:
            raise ValueError("file ids are not supported by this server (it stores no files); send the image "
                             "as 'image_url' (a data: URL, or an http(s) URL the server may fetch)")
        if self.image_url is None:
            raise ValueError("'image_url' is required")
        return self


class OutputText(_Item):
    type: Literal["output_text"]
    text: str


class Refusal(_Item):
    type: Literal["refusal"]
    refusal: str


# Content part kinds this server has no means for, refused by name.
UNSUPPORTED_PARTS = {"input_file": "file inputs", "input_audio": "audio inputs"}
Part = Annotated[Union[InputText, InputImage, OutputText, Refusal], Field(discriminator="type")]
PARTS = {"user": ("input_text", "input_image"), "system": ("input_text",), "developer": ("input_text",),
         "assistant": ("output_text", "input_text", "refusal")}


class InputMessage(_Item):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    @model_validator(mode="after")
    def _parts_of_the_role(self) -> InputMessage:
        for part in self.content if isinstance(self.content, list) else []:
            if part.type not in PARTS[self.role]:
                raise ValueError(f"a {self.role} message cannot hold '{part.type}' parts (it may hold "
                                 f"{', '.join(PARTS[self.role])})")
        return self

    def text(self) -> str:
        """The text of an assistant message (its parts joined)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.refusal if isinstance(part, Refusal) else part.text for part in self.content)


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    call_id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    arguments: str
    namespace: None = None  # namespaced tools (tool search) are not supported

    @field_validator("namespace", mode="before")
    @classmethod
    def _no_namespace(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("namespaced tools are not supported by this server")
        return value


class FunctionCallOutput(_Item):
    type: Literal["function_call_output"]
    call_id: Annotated[str, Field(min_length=1)]
    output: str | list[InputText]

    @field_validator("output", mode="before")
    @classmethod
    def _text_only(cls, output: Any) -> Any:
        if isinstance(output, list) and any(isinstance(p, dict) and p.get("type") != "input_text" for p in output):
            raise ValueError("only text ('input_text' parts) is supported in function call outputs by this "
                             "server; send images in a user message")
        return output

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(part.text for part in self.output)


class ReasoningText(_Item):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningItem(_Item):
    type: Literal["reasoning"]
    summary: list[ReasoningText] = []
    content: list[ReasoningText] | None = None
    encrypted_content: None = None  # this server makes none, so it takes none back

    @field_validator("encrypted_content", mode="before")
    @classmethod
    def _in_the_clear(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("encrypted reasoning is not supported by this server (it returns reasoning in the "
                             "clear, as 'content'); send the reasoning as 'content'")
        return value
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    def text(self) -> str:
        """The reasoning for the chat template: its content, else its summary (as vLLM reads it)."""
        return "\n".join(part.text for part in self.content or self.summary)


def item_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("type", "message")
    return getattr(value, "type", None)


Item = Annotated[
    Union[Annotated[InputMessage, Tag("message")], Annotated[FunctionCallItem, Tag("function_call")],
          Annotated[FunctionCallOutput, Tag("function_call_output")], Annotated[ReasoningItem, Tag("reasoning")]],
    Discriminator(item_kind),
]


class FunctionTool(_Item):
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]  # as chat's functions
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: Literal[False] | None = None  # tool search is not supported

    def echo(self) -> dict:
        """The tool as a response shows it."""
        return {"type": "function", "name": self.name, "description": self.description,
                "parameters": self.parameters, "strict": self.strict}


class NamedFunction(_Item):
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1)]


class TextFormat(_Item):
    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    description: str | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> TextFormat:
        if self.type == "json_schema" and (self.name is None or self.schema_ is None):
            raise ValueError("'name' and 'schema' are required when type is 'json_schema'")
        return self


class TextConfig(_Item):
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None  # the no-op value only (as Chat Completions' `verbosity`)


class Reasoning(_Item):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None  # accepted: no summaries are made
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class StreamOptions(_Item):
    include_obfuscation: bool | None = None  # accepted: no obfuscation field is added
