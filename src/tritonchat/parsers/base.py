"""Data types, interfaces and registries shared by the tool-call and reasoning parsers.

A parser turns generated text into structured pieces. It is fed the text piece by piece
(`feed`), then told that generation ended (`finish`); each call returns the `Delta` that
piece adds. `parse` does the same for a whole text at once and always agrees with what
streaming the same text produces, however it was split.
"""

from __future__ import annotations

import importlib
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

ALPHANUMERICS = string.ascii_letters + string.digits


def random_alphanumerics(length: int) -> str:
    return "".join(secrets.choice(ALPHANUMERICS) for _ in range(length))


def default_call_id() -> str:
    return "call_" + random_alphanumerics(24)


@dataclass
class ToolCall:
    """A complete call."""

    id: str
    name: str
    arguments: str  # JSON text of the arguments object, exactly as it is sent


@dataclass
class ToolCallDelta:
    """One streamed piece of one call."""

    index: int  # 0, 1, 2... per call in this choice
    id: str | None = None  # only in the first delta of a call
    name: str | None = None  # the complete name, only in the first delta of a call
    arguments: str = ""  # a fragment of the arguments JSON text


@dataclass
class Delta:
    """What one fed piece of text adds."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)


class _StreamingParser:
    """Collects what a parser emits while it reads one piece into a `Delta`."""

    def __init__(self) -> None:
        self._delta = Delta()
        self._finished = False
        self._pending = ""  # text received and not yet accounted for

    def feed(self, text: str) -> Delta:
        """Streaming: read the next piece of generated text."""
        if self._finished:
            raise RuntimeError(f"{type(self).__name__}.feed() called after finish()")
        self._consume(text, final=False)
        return self._take_delta()

    def finish(self) -> Delta:
        """End of generation: flush whatever was held back."""
        if not self._finished:
            self._finished = True
            self._consume("", final=True)
        return self._take_delta()

    def _consume(self, text: str, final: bool) -> None:
        """Queue `text` and make progress until more text is needed."""
        self._pending += text
        while self._step(final):
            pass

    def _step(self, final: bool) -> bool:
        """One step of reading `_pending`; False when more text is needed. By default the
        current stage (`self._stage`, a bound method that subclasses switch) takes it."""
        return self._stage(final)

    def _read_content(self, final: bool) -> bool:
        """A stage: everything from here on is content."""
        self._emit_content(self._pending)
        self._pending = ""
        return False

    def _take_delta(self) -> Delta:
        delta, self._delta = self._delta, Delta()
        return delta

    def _emit_content(self, text: str) -> None:
        self._delta.content += text


class ToolParser(_StreamingParser):
    """Finds tool calls in generated content. One instance per choice per request.

    Subclasses read `_pending` in stages (`_stage`, or their own `_step` / `_consume`) and
    report what they find with `_emit_content`, `_open_call` (once per call, with its
    complete name) and `_emit_arguments`.
    """

    # True when the call markers are special tokens, which the engine must then keep in
    # the text it returns (sampling parameter skip_special_tokens=false).
    needs_special_tokens = False

    def __init__(self, tools: list[dict] | None = None, make_id: Callable[[], str] | None = None) -> None:
        super().__init__()
        self.tools = list(tools or [])
        self._make_id = make_id or self.default_make_id
        self.calls: list[ToolCall] = []  # the calls seen so far, arguments as sent so far

    @staticmethod
    def default_make_id() -> str:
        return default_call_id()

    def _open_call(self, name: str, call_id: str | None = None) -> int:
        """Announce a call; `call_id` is for formats in which the model writes the id itself."""
        index = len(self.calls)
        call = ToolCall(id=call_id or self._make_id(), name=name, arguments="")
        self.calls.append(call)
        self._delta.tool_calls.append(ToolCallDelta(index=index, id=call.id, name=name))
        return index

    def _emit_arguments(self, index: int, fragment: str) -> None:
        if not fragment:
            return
        self.calls[index].arguments += fragment
        pieces = self._delta.tool_calls
        if pieces and pieces[-1].index == index:
            pieces[-1].arguments += fragment
        else:
            pieces.append(ToolCallDelta(index=index, arguments=fragment))


class ReasoningParser(_StreamingParser):
    """Separates reasoning from content. One instance per choice per request."""

    # True when the reasoning markers are special tokens (gpt-oss's Harmony format), which
    # the engine must then keep in the text it returns (skip_special_tokens=false).
    needs_special_tokens = False

    def __init__(self, starts_in_reasoning: bool = False) -> None:
        super().__init__()
        self.starts_in_reasoning = starts_in_reasoning

    def _emit_reasoning(self, text: str) -> None:
        self._delta.reasoning += text


TOOL_PARSERS: dict[str, type[ToolParser]] = {}
REASONING_PARSERS: dict[str, type[ReasoningParser]] = {}

_T = TypeVar("_T")


def _registrar(registry: dict[str, type[_T]], name: str) -> Callable[[type[_T]], type[_T]]:
    def register(cls: type[_T]) -> type[_T]:
        if name in registry and registry[name] is not cls:
            raise ValueError(f"parser name {name!r} is already taken by {registry[name].__name__}")
        registry[name] = cls
        return cls

    return register


def register_tool_parser(name: str) -> Callable[[type[ToolParser]], type[ToolParser]]:
    return _registrar(TOOL_PARSERS, name)


def register_reasoning_parser(name: str) -> Callable[[type[ReasoningParser]], type[ReasoningParser]]:
    return _registrar(REASONING_PARSERS, name)


def _lookup(registry: dict[str, type[_T]], package: str, kind: str, name: str) -> type[_T]:
    importlib.import_module(package)  # its modules register themselves on import
    try:
        return registry[name]
    except KeyError:
        known = ", ".join(sorted(registry)) or "none"
        raise ValueError(f"unknown {kind} parser {name!r}; known: {known}") from None


def get_tool_parser(name: str) -> type[ToolParser]:
    return _lookup(TOOL_PARSERS, "tritonchat.parsers.tool_calls", "tool-call", name)


def get_reasoning_parser(name: str) -> type[ReasoningParser]:
    return _lookup(REASONING_PARSERS, "tritonchat.parsers.reasoning", "reasoning", name)
