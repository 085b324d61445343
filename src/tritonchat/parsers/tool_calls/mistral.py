"""Mistral tool calls, both generations of the format:

    [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": ...}]
                                    (tokenizer versions before v11: one JSON array)
    [TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]get_time[ARGS]{}
                                    (v11 and later: one marker per call)

- `[TOOL_CALLS]` and `[ARGS]` are special tokens: the server must decode them
  (skip_special_tokens=False) for this parser to see them.
- Also accepted: a single object instead of the array, and `name{...}` without `[ARGS]`.
- Text before the first `[TOOL_CALLS]` is content; so is text after the calls, except
  whitespace alone.
- What follows `[TOOL_CALLS]` and is not a call (a name with spaces or other odd
  characters, anything that is not JSON where a call's JSON belongs) is released as
  content, verbatim from the marker, as soon as that is certain. Announced calls stay
  calls; their arguments are what the model wrote (see hermes.py).
- Call ids are 9 alphanumerics: Mistral's chat templates reject any other shape.
- `[THINK]` reasoning blocks (Magistral) are not handled here.
"""

from __future__ import annotations

import re

from ..base import random_alphanumerics, register_tool_parser
from ..tags import split_at_tag
from .json_call import JsonCall, settle_call, stream_call
from .tagged import TaggedCallsParser

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_ARRAY_SEPARATORS = " \t\r\n,"


@register_tool_parser("mistral")
class MistralToolParser(TaggedCallsParser):
    open_tag = TOOL_CALLS
    needs_special_tokens = True  # [TOOL_CALLS] is a special token

    @staticmethod
    def default_make_id() -> str:
        return random_alphanumerics(9)

    def _start_calls(self) -> None:
        self._markup = TOOL_CALLS  # read since the last call; content if no call follows
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
            self._stage = self._read_name
        return True

    def _read_name(self, final: bool) -> bool:
        name, tag, rest = split_at_tag(self._pending, ARGS, "{")
        looks_like_name = _NAME.fullmatch(name.strip()) is not None
        if tag is None and not final and (looks_like_name or not name.strip()):
            return False
        if tag is None or not looks_like_name:
            self._give_up_from_marker()
            return True
        if tag == ARGS:
            self._markup, self._pending = self._markup + name + tag, rest
        else:  # the "{" opens the arguments
            self._markup, self._pending = self._markup + name, tag + rest
        self._begin_call(JsonCall(name=name.strip()))
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
        call.append(self._pending)
        self._pending = ""
        self._index = stream_call(self, call, self._index)
        if not (call.finished or final or (call.broken and self._index is None)):
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
