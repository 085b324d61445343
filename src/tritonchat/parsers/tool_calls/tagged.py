"""Content in which each group of tool calls opens with a marker tag."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from ..base import ToolParser
from ..tags import could_become, split_at_tag


class TaggedCallsParser(ToolParser):
    """Text is content until one of `open_tags`; what follows it is read by the subclass
    (`_read_calls`, with the tag that opened in `_tag`), which hands back to content with
    `_end_calls` or `_give_up`.

    Whitespace alone between or after calls is dropped (models put newlines there); any
    other text there is content, whitespace included. A tag split across pieces is held
    back until it is complete, and released as content as soon as it cannot be one.
    """

    open_tags: ClassVar[tuple[str, ...]]

    def __init__(self, tools: list[dict] | None = None, make_id: Callable[[], str] | None = None) -> None:
        super().__init__(tools, make_id)
        self._in_calls = False
        self._after_calls = False
        self._tag = ""  # the open tag that was read last

    def _step(self, final: bool) -> bool:
        """Make progress; False when more text is needed."""
        if self._in_calls:
            return self._read_calls(final)
        if self._after_calls:
            return self._skip_whitespace_after_calls(final)
        return self._read_content(final)

    def _read_content(self, final: bool) -> bool:
        before, tag, rest = split_at_tag(self._pending, *self.open_tags)
        if final and tag is None:
            before, rest = self._pending, ""
        self._emit_content(before)
        self._pending = rest
        if tag is None:
            return False
        self._in_calls, self._tag = True, tag
        self._start_calls()
        return True

    def _skip_whitespace_after_calls(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        if stripped.startswith(self.open_tags):
            self._pending = stripped
        elif not stripped and final:
            self._pending = ""
            return False
        elif not final and any(could_become(stripped, tag) for tag in self.open_tags):
            return False
        self._after_calls = False
        return True

    # For subclasses.

    def _start_calls(self) -> None:
        """`self._tag` was just read; `_pending` holds what follows it."""

    def _read_calls(self, final: bool) -> bool:
        raise NotImplementedError

    def _end_calls(self) -> None:
        self._in_calls, self._after_calls = False, True

    def _give_up(self, raw: str) -> None:
        """What was read since the tag is not a call after all: it is content, and so is what follows."""
        self._emit_content(raw)
        self._in_calls, self._after_calls = False, False
