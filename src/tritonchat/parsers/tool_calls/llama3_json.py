"""Llama 3.1 / 3.2 JSON tool calls (Meta's "JSON based tool calling" prompt format):

    {"name": "get_weather", "parameters": {"city": "Oslo"}}
    <|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}

- A reply is tool calls only if it starts (after whitespace) with `<|python_tag|>` or `{`,
  as Meta's format has the model answer with the JSON alone; otherwise it is all content.
  (vLLM's streaming path decides the same way.)
- Several calls are separated by `;` and/or whitespace; "parameters" and "arguments" are
  both accepted; other keys (e.g. `"type": "function"`) are ignored.
- Text after the calls is content, verbatim from the end of the last call; `;` and
  whitespace alone there are dropped.
- Not a call (JSON that is not `{"name": ..., "parameters": {...}}`, or `<|python_tag|>`
  followed by Python code for Llama's built-in tools): released as content, verbatim
  from the start, as soon as that is certain. Announced calls stay calls; their arguments
  are what the model wrote (see hermes.py).
"""

from __future__ import annotations

from collections.abc import Callable

from ..base import ToolParser, register_tool_parser
from ..tags import could_become
from .json_call import JsonCall, read_bare_call, settle_call

PYTHON_TAG = "<|python_tag|>"
_SEPARATORS = " \t\r\n;"


@register_tool_parser("llama3_json")
class Llama3JsonToolParser(ToolParser):
    def __init__(self, tools: list[dict] | None = None, make_id: Callable[[], str] | None = None) -> None:
        super().__init__(tools, make_id)
        self._markup = ""  # tag and separators read since the last call; content if no call follows
        self._stage = self._read_start
        self._call = JsonCall()
        self._index: int | None = None

    def _read_start(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        if stripped.startswith(PYTHON_TAG):
            tag_end = len(self._pending) - len(stripped) + len(PYTHON_TAG)
            self._markup, self._pending = self._pending[:tag_end], self._pending[tag_end:]
        elif not stripped.startswith("{"):
            if could_become(stripped, PYTHON_TAG) and not final:
                return False
            self._stage = self._read_content
            return True
        self._stage = self._read_between_calls
        return True

    def _read_between_calls(self, final: bool) -> bool:
        stripped = self._pending.lstrip(_SEPARATORS)
        if stripped.startswith("{"):
            self._markup += self._pending[: len(self._pending) - len(stripped)]
            self._pending = stripped
            self._call, self._index = JsonCall(), None
            self._stage = self._read_call
            return True
        if not stripped:
            if final and not self.calls:
                self._give_up(self._markup + self._pending)
            return False
        self._give_up(self._markup + self._pending)
        return False

    def _read_call(self, final: bool) -> bool:
        call = self._call
        self._index, over = read_bare_call(self, call, self._index, self._pending, final)
        self._pending = ""
        if not over:
            return False
        if not settle_call(self, call, self._index):
            self._give_up(self._markup + call.text)
            return False
        self._markup, self._pending = "", call.leftover()
        self._stage = self._read_between_calls
        return True

    def _give_up(self, unsent: str) -> None:
        """Not a call after all: `unsent` (all text not yet accounted for) and what follows are content."""
        self._emit_content(unsent)
        self._pending = ""
        self._stage = self._read_content
