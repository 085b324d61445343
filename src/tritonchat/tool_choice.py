"""`tools`, `tool_choice` and `parallel_tool_calls`: what to constrain and how to read the output.

- `none` (or no tools): the text is content (tools still reach the chat template).
- `auto` (the default with tools): free generation, read by the configured tool-call parser;
  finish_reason `tool_calls` when calls were found.
- named `{"type": "function", "function": {"name": ...}}`: generation constrained to that
  function's parameters schema; the whole output is its arguments; finish_reason `stop`.
- `required`: generation constrained to a JSON array of one or more `{name, parameters}`
  objects over the given tools; finish_reason `tool_calls`.
`parallel_tool_calls: false` allows one call: the array schema takes at most one item, and
in `auto` mode only the first call found is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .choice_text import ChoiceText
from .parsers.base import Delta, ReasoningParser, ToolParser, get_reasoning_parser, get_tool_parser
from .parsers.tool_calls.json_call import JsonCall, settle_call, stream_call
from .protocol import ChatCompletionRequest, NamedToolChoice

_WHITESPACE = " \t\r\n"


class NamedToolParser(ToolParser):
    """The output is the arguments of one known function (generation was constrained to them)."""

    def __init__(self, name: str, make_id: Callable[[], str] | None = None):
        super().__init__(None, make_id)
        self.name = name
        self._index: int | None = None

    def _consume(self, text: str, final: bool) -> None:
        if self._index is None and (text or final):
            self._index = self._open_call(self.name)
        if text:
            self._emit_arguments(self._index, text)


class RequiredToolParser(ToolParser):
    """The output is a JSON array of `{"name": ..., "parameters": {...}}` (constrained)."""

    def __init__(self, tools: list[dict] | None = None, make_id: Callable[[], str] | None = None):
        super().__init__(tools, make_id)
        self._stage = self._read_open
        self._call = JsonCall()
        self._index: int | None = None

    def _read_open(self, final: bool) -> bool:
        stripped = self._pending.lstrip(_WHITESPACE)
        if not stripped:
            return False
        if stripped[0] != "[":
            self._stage = self._ignore
            return False
        self._pending = stripped[1:]
        self._stage = self._read_between
        return True

    def _read_between(self, final: bool) -> bool:
        stripped = self._pending.lstrip(_WHITESPACE + ",")
        if not stripped:
            self._pending = ""
            return False
        if stripped[0] == "{":
            self._pending = stripped
            self._call, self._index = JsonCall(), None
            self._stage = self._read_call
            return True
        self._stage = self._ignore  # "]" or anything after the array
        return False

    def _read_call(self, final: bool) -> bool:
        call = self._call
        call.append(self._pending)
        self._pending = ""
        self._index = stream_call(self, call, self._index)
        if not (call.finished or final):
            return False
        settle_call(self, call, self._index)
        self._pending = call.leftover()
        self._stage = self._read_between
        return True

    def _ignore(self, final: bool) -> bool:
        self._pending = ""
        return False


class FirstCallOnly(ToolParser):
    """`parallel_tool_calls: false` in `auto` mode: keep the first call a parser finds. A wrapper:
    all state is the inner parser's, and `calls` is a read-only view of its first call."""

    def __init__(self, inner: ToolParser):  # noqa: PLW0231  (the base initializer would set state kept in `inner`)
        self.inner = inner
        self.tools = inner.tools
        self.needs_special_tokens = inner.needs_special_tokens

    @property
    def calls(self):  # type: ignore[override]
        return self.inner.calls[:1]

    def feed(self, text: str) -> Delta:
        return self._first(self.inner.feed(text))

    def finish(self) -> Delta:
        return self._first(self.inner.finish())

    @staticmethod
    def _first(delta: Delta) -> Delta:
        delta.tool_calls = [piece for piece in delta.tool_calls if piece.index == 0]
        return delta


@dataclass
class ToolPlan:
    structured: dict | None  # constraint for the engine, if tool_choice needs one
    choice_text: Callable[[], ChoiceText] | None  # per choice, how to read the text
    calls_finish_reason: str | None  # finish_reason when calls were made (None: the engine's)
    sampling: dict | None = None  # sampling parameters the parsing needs


def required_schema(functions: dict[str, dict], one_call: bool) -> dict:
    schema = {
        "type": "array",
        "minItems": 1,
        "items": {
            "type": "object",
            "anyOf": [
                {
                    "properties": {
                        "name": {"type": "string", "enum": [name]},
                        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
                    },
                    "required": ["name", "parameters"],
                }
                for name, function in functions.items()
            ],
        },
    }
    if one_call:
        schema["maxItems"] = 1
    return schema


def plan_tools(
    request: ChatCompletionRequest,
    *,
    tool_call_parser: str,
    reasoning_parser: str,
    starts_in_reasoning: bool,
) -> ToolPlan:
    """The constraint and the parsing that `tool_choice` asks for (the request is already valid,
    and `check_policy` made sure a parser is configured where one is needed)."""
    functions = request.functions
    choice = request.effective_tool_choice
    one_call = request.parallel_tool_calls is False
    reasoning_class = get_reasoning_parser(reasoning_parser) if reasoning_parser else None
    structured = None
    sampling = None
    if reasoning_class is not None and reasoning_class.needs_special_tokens:  # Harmony's channel markers
        sampling = {"skip_special_tokens": False}
    finish = "tool_calls"
    if isinstance(choice, NamedToolChoice):
        name = choice.function.name
        structured = {"json": functions[name].get("parameters") or {"type": "object", "properties": {}}}
        finish = None

        def make_tools() -> ToolParser | None:
            return NamedToolParser(name)
    elif choice == "required":
        structured = {"json": required_schema(functions, one_call)}

        def make_tools() -> ToolParser | None:
            return RequiredToolParser(request_tools(request))
    elif choice == "auto":
        parser_class = get_tool_parser(tool_call_parser)
        if parser_class.needs_special_tokens:
            sampling = {"skip_special_tokens": False}
        if getattr(parser_class, "reads_reasoning", False):  # it separates the reasoning itself (Harmony)
            reasoning_class = None

        def make_tools() -> ToolParser | None:
            parser = parser_class(request_tools(request))
            return FirstCallOnly(parser) if one_call else parser
    else:

        def make_tools() -> ToolParser | None:
            return None

    if reasoning_class is None and choice == "none":
        return ToolPlan(structured=None, choice_text=None, calls_finish_reason=None)

    def make_choice_text() -> ChoiceText:
        reasoning: ReasoningParser | None = reasoning_class(starts_in_reasoning) if reasoning_class else None
        return ChoiceText(reasoning, make_tools())

    return ToolPlan(structured=structured, choice_text=make_choice_text, calls_finish_reason=finish, sampling=sampling)


def request_tools(request: ChatCompletionRequest) -> list[dict]:
    return [tool.model_dump(exclude_none=True) for tool in request.tools or []]


def prompt_opens_reasoning(prompt: str, open_tag: str = "<think>", close_tag: str = "</think>") -> bool:
    """Whether the rendered prompt leaves a reasoning block open for the model to continue."""
    opened = prompt.rfind(open_tag)
    return opened >= 0 and prompt.rfind(close_tag) < opened
