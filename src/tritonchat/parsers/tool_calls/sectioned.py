"""Tool calls in a marked section, each call in its own markers (DeepSeek, Kimi K2):

    content SECTION_BEGIN CALL_BEGIN head HEAD_END {arguments} CALL_END CALL_BEGIN ... SECTION_END

The head (what names the call) differs per format and is read by the subclass; the
arguments are a JSON object, streamed as the model writes it (see json_call.py).

- Text before the section is content; so is text after it, except whitespace alone.
- Whitespace between calls is dropped.
- A call also ends at the next CALL_BEGIN or at SECTION_END if the model left out its
  CALL_END, and at the end of generation. Text after its JSON object (DeepSeek V3's
  closing code fence) is ignored.
- Empty arguments (nothing but whitespace between HEAD_END and CALL_END) are `{}`.
- Malformed calls are never dropped: a head that does not name a call, arguments that are
  not a JSON object, or a section without calls are released as content, markers
  included, from the section marker (or the end of the last good call) on. A call that was
  already announced stays a call, and its arguments are whatever the model wrote.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

from ..tags import could_become, split_at_tag
from .json_call import JsonCall, settle_call, stream_call
from .tagged import TaggedCallsParser

NAME = re.compile(r"[\w.\-]+")


class SectionedCallsParser(TaggedCallsParser):
    section_end: ClassVar[str]
    call_begin: ClassVar[str]
    call_end: ClassVar[str]
    head_end: ClassVar[str]  # ends the head of a call
    head_end_is_arguments: ClassVar[bool] = False  # True when head_end is the arguments' "{"

    def __init__(self, tools: list[dict] | None = None, make_id: Callable[[], str] | None = None) -> None:
        super().__init__(tools, make_id)
        self._call_id: str | None = None

    def _parse_head(self, head: str) -> tuple[str, str | None] | None:
        """(name, the model's own call id or None) of a call's head, or None if it names no call."""
        raise NotImplementedError

    def _open_call(self, name: str, call_id: str | None = None) -> int:
        return super()._open_call(name, call_id or self._call_id)

    def _start_calls(self) -> None:
        self._markup = self._tag  # read since the last call; content if no call follows
        self._calls_before = len(self.calls)
        self._stage = self._read_between_calls

    def _read_calls(self, final: bool) -> bool:
        return self._stage(final)

    def _read_between_calls(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        self._markup += self._pending[: len(self._pending) - len(stripped)]
        self._pending = stripped
        had_calls = len(self.calls) > self._calls_before
        if stripped.startswith(self.call_begin):
            self._markup += self.call_begin
            self._pending = stripped[len(self.call_begin) :]
            self._stage = self._read_head
        elif stripped.startswith(self.section_end) and had_calls:
            self._pending = stripped[len(self.section_end) :]
            self._end_calls()
        elif not final and (
            not stripped or could_become(stripped, self.call_begin) or could_become(stripped, self.section_end)
        ):
            return False
        elif had_calls:  # other text after calls: it is content, whitespace included
            self._pending, self._markup = self._markup + self._pending, ""
            self._end_calls()
        else:
            self._give_up(self._markup)
        return True

    def _read_head(self, final: bool) -> bool:
        head, tag, rest = split_at_tag(self._pending, self.head_end, self.call_end, self.call_begin, self.section_end)
        if tag is None and not final:
            return False
        parsed = self._parse_head(head) if tag == self.head_end else None
        if parsed is None:
            self._give_up(self._markup)  # the head and what follows are read again as content
            return True
        name, self._call_id = parsed
        if self.head_end_is_arguments:
            self._markup, self._pending = self._markup + head, tag + rest
        else:
            self._markup, self._pending = self._markup + head + tag, rest
        self._call, self._index = JsonCall(name=name), None
        self._stage = self._read_arguments
        return True

    def _read_arguments(self, final: bool) -> bool:
        body, tag, rest = split_at_tag(self._pending, self.call_end, self.call_begin, self.section_end)
        if final and tag is None:
            body, rest = self._pending, ""
        self._pending = rest
        call = self._call
        call.append(body)
        self._index = stream_call(self, call, self._index)
        if tag is None and not final:
            return False
        if self._index is None and not call.text.strip():
            self._emit_arguments(self._open_call(call.name), "{}")  # type: ignore[arg-type]
        elif not settle_call(self, call, self._index):
            if tag == self.call_end:
                self._give_up(self._markup + call.text + tag)
            else:
                self._give_up(self._markup + call.text)
                self._pending = (tag or "") + self._pending
            return True
        self._markup, self._call_id = "", None
        if tag == self.section_end:
            self._end_calls()
        else:
            if tag == self.call_begin:
                self._pending = tag + self._pending
            self._stage = self._read_between_calls
        return True
