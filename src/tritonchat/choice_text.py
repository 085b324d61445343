"""What a choice's generated text means: reasoning, content and tool calls.

A `ChoiceText` chains an optional reasoning parser (whose content part goes on) and an
optional tool-call parser, for one choice. Streaming (`feed` / `finish`) and whole-text
(`parse`) give the same result. `NamedToolParser` and `RequiredToolParser` read the
output of generation constrained by `tool_choice` (see `tool_choice.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .parsers.base import Delta, ReasoningParser, ToolCall, ToolParser


@dataclass
class ParsedChoice:
    reasoning: str | None = None
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


class ChoiceText:
    def __init__(self, reasoning: ReasoningParser | None = None, tools: ToolParser | None = None):
        self.reasoning = reasoning
        self.tools = tools

    @property
    def reads_reasoning(self) -> bool:
        """Whether reasoning is separated out (by the reasoning parser, or by a tool parser that
        reads it too, as Harmony's does): the whole message then has a reasoning field."""
        return self.reasoning is not None or bool(getattr(self.tools, "reads_reasoning", False))

    @property
    def calls(self) -> list[ToolCall]:
        return self.tools.calls if self.tools is not None else []

    def feed(self, text: str) -> Delta:
        if self.reasoning is None:
            return self._tools_feed(text)
        piece = self.reasoning.feed(text)
        out = self._tools_feed(piece.content)
        out.reasoning = piece.reasoning
        return out

    def finish(self) -> Delta:
        if self.reasoning is None:
            return self._tools_finish(Delta())
        piece = self.reasoning.finish()
        out = self._tools_feed(piece.content)
        out.reasoning = piece.reasoning
        return self._tools_finish(out)

    def _tools_feed(self, text: str) -> Delta:
        if self.tools is None or not text:
            return Delta(content=text)
        return self.tools.feed(text)

    def _tools_finish(self, out: Delta) -> Delta:
        if self.tools is None:
            return out
        rest = self.tools.finish()
        out.reasoning += rest.reasoning  # a parser of both (Harmony's channels) gives reasoning too
        out.content += rest.content
        out.tool_calls += rest.tool_calls
        return out

    def parse(self, text: str) -> ParsedChoice:
        """The whole text at once; the same result as streaming it."""
        first, last = self.feed(text), self.finish()
        reasoning = first.reasoning + last.reasoning
        content = first.content + last.content
        return ParsedChoice(reasoning=reasoning or None, content=content or None, tool_calls=list(self.calls))
