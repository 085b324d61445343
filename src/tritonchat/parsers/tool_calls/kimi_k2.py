"""Kimi K2 tool calls:

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|>
    <|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>

- The markers are special tokens: the server must decode them (skip_special_tokens=False).
- The head `functions.NAME:INDEX` is Kimi's own call id, and it is used as the call's id
  (Kimi's chat template writes it back in later turns); the name is NAME. A head without
  `:INDEX` still names a call, whose id is then `functions.NAME:N`, N its position in
  this reply.
- See sectioned.py for what happens around and between calls and with malformed ones.
"""

from __future__ import annotations

import re

from ..base import register_tool_parser
from .sectioned import NAME, SectionedCallsParser

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"

_HEAD = re.compile(rf"(?:functions\.)?({NAME.pattern}?)(:\d+)?")


@register_tool_parser("kimi_k2")
class KimiK2ToolParser(SectionedCallsParser):
    open_tags = (SECTION_BEGIN,)
    section_end = SECTION_END
    call_begin = CALL_BEGIN
    call_end = CALL_END
    head_end = ARGUMENT_BEGIN
    needs_special_tokens = True

    def _parse_head(self, head: str) -> tuple[str, str | None] | None:
        head = head.strip()
        match = _HEAD.fullmatch(head)
        if not match or not match.group(1):
            return None
        name = match.group(1)
        return name, head if match.group(2) else f"functions.{name}:{len(self.calls)}"
