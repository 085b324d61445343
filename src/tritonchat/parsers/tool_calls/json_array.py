"""Tool calls as JSON after a marker: an array of call objects, or a single one.

    MARKER [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": ...}]
    MARKER {"name": "get_time", "arguments": {}}

Mistral (tokenizers before v11) and Granite 3 write calls this way. Each element is read
by `JsonCall` (keys in any order, "parameters" accepted, missing arguments are `{}`); the
arguments stream as the model writes them. What follows the marker and is not a call is
released as content, verbatim from the marker, as soon as that is certain; an element
after the first that is not a call ends the calls, and it and the rest are content.
"""

from __future__ import annotations

from .json_call import JsonCall, read_bare_call, settle_call
from .tagged import TaggedCallsParser

_ARRAY_SEPARATORS = " \t\r\n,"


class JsonCallsAfterMarker(TaggedCallsParser):
    """Reads the JSON after an open tag; subclasses may accept other shapes in `_read_other`."""

    def _start_calls(self) -> None:
        self._markup = self._tag  # read since the last call; content if no call follows
        self._stage = self._read_format
        self._in_array = False
        self._calls_before = len(self.calls)
        self._call = JsonCall()
        self._index: int | None = None

    def _read_calls(self, final: bool) -> bool:
        return self._stage(final)

    def _read_format(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        if not stripped:
            if final:
                self._give_up_from_marker()
            return final
        self._markup += self._pending[: len(self._pending) - len(stripped)]
        self._pending = stripped
        if stripped.startswith("["):
            self._markup += "["
            self._pending = stripped[1:]
            self._in_array = True
            self._stage = self._read_array
        elif stripped.startswith("{"):
            self._begin_call(JsonCall())
        else:
            return self._read_other(final)
        return True

    def _read_other(self, final: bool) -> bool:
        """`_pending` starts with something other than `[` or `{` after the marker."""
        self._give_up_from_marker()
        return True

    def _read_array(self, final: bool) -> bool:
        stripped = self._pending.lstrip(_ARRAY_SEPARATORS)
        self._markup += self._pending[: len(self._pending) - len(stripped)]
        self._pending = stripped
        if stripped.startswith("{"):
            self._begin_call(JsonCall())
            return True
        if stripped.startswith("]") and len(self.calls) > self._calls_before:
            self._pending = stripped[1:]
            self._end_calls()
            return True
        if not stripped and not final:
            return False
        self._give_up_from_marker()
        return True

    def _begin_call(self, call: JsonCall) -> None:
        self._call, self._index = call, None
        self._stage = self._read_call

    def _read_call(self, final: bool) -> bool:
        call = self._call
        self._index, over = read_bare_call(self, call, self._index, self._pending, final)
        self._pending = ""
        if not over:
            return False
        if not settle_call(self, call, self._index):
            # Read it again as content, where it may hold the next marker. However early or
            # late the failure shows, the same text is read again from the same place.
            self._pending = call.text
            self._give_up_from_marker()
            return True
        self._markup, self._pending = "", call.leftover()
        if self._in_array:
            self._stage = self._read_array
        else:
            self._end_calls()
        return True

    def _give_up_from_marker(self) -> None:
        """Not a call: the markup read so far is content, and the rest is read again as content."""
        self._give_up(self._markup)
