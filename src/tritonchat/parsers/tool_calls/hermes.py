"""Hermes-style tool calls, as written by Hermes 2 Pro/3, Qwen2.5 and Qwen3:

    Let me check.<tool_call>
    {"name": "get_weather", "arguments": {"city": "Oslo"}}
    </tool_call>
    <tool_call>
    {"name": "get_time", "arguments": {}}
    </tool_call>

- Text before, between and after calls is content; whitespace alone between or after
  calls is dropped.
- A call is announced (id and complete name) as soon as its name and the start of its
  arguments object (`{"` or `{}`) have been read; the arguments then stream as the model
  writes them.
- A call body also ends at the next `<tool_call>` if the model forgot `</tool_call>`, and
  at the end of generation (a body that is complete JSON when generation stops, e.g.
  because `</tool_call>` was a stop string, is a normal call).
- Text after the JSON object inside the tags is ignored.
- Malformed calls are never dropped: a body that is not a `{"name": ..., "arguments": {...}}`
  object is released as content, tags included, when it ends. A call that was already
  announced stays a call, and its arguments are whatever the model wrote (e.g. cut off by
  the token limit); they are not repaired, just as OpenAI sends them.
"""

from __future__ import annotations

from ..base import register_tool_parser
from ..tags import split_at_tag
from .json_call import JsonCall, settle_call, stream_call
from .tagged import TaggedCallsParser

START_TAG = "<tool_call>"
END_TAG = "</tool_call>"


@register_tool_parser("hermes")
class HermesToolParser(TaggedCallsParser):
    open_tags = (START_TAG,)

    def _start_calls(self) -> None:
        self._call = JsonCall()
        self._index: int | None = None

    def _read_calls(self, final: bool) -> bool:
        body, tag, rest = split_at_tag(self._pending, END_TAG, START_TAG)
        if final and tag is None:
            body, rest = self._pending, ""
        self._pending = rest
        self._call.append(body)
        self._index = stream_call(self, self._call, self._index)
        if tag is None and not final:
            return False
        if not settle_call(self, self._call, self._index):
            self._give_up(START_TAG + self._call.text + (END_TAG if tag == END_TAG else ""))
            if tag == START_TAG:  # read the next call again, now from content
                self._pending = START_TAG + self._pending
        elif tag == START_TAG:
            self._start_calls()
        else:
            self._end_calls()
        return True
