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
from .json_array import JsonCallsAfterMarker
from .json_call import JsonCall

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


@register_tool_parser("mistral")
class MistralToolParser(JsonCallsAfterMarker):
    open_tags = (TOOL_CALLS,)
    needs_special_tokens = True  # [TOOL_CALLS] is a special token

    @staticmethod
    def default_make_id() -> str:
        return random_alphanumerics(9)

    def _read_other(self, final: bool) -> bool:
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
