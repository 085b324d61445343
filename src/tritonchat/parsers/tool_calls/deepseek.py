"""DeepSeek tool calls, in the two formats of DeepSeek's chat templates:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Oslo"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>                 (deepseek_v3: V3, R1)

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Oslo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
                                                          (deepseek_v31: V3.1)

The markers use full-width bars (｜) and ▁. They are not special tokens of DeepSeek's
tokenizers, so the server's default (skip_special_tokens) keeps them. See sectioned.py
for what happens around and between calls and with malformed ones.

- deepseek_v3: the head is `function<｜tool▁sep｜>NAME`, then a line with ```json (the
  fence is optional), then the arguments object; the closing fence is ignored.
- deepseek_v31: the head is the name; the arguments object follows `<｜tool▁sep｜>`.
"""

from __future__ import annotations

import re

from ..base import register_tool_parser
from .sectioned import NAME, SectionedCallsParser

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEPARATOR = "<｜tool▁sep｜>"

_V3_HEAD = re.compile(rf"\s*function\s*{SEPARATOR}\s*({NAME.pattern})\s*(?:```(?:json)?\s*)?")


class _DeepSeekToolParser(SectionedCallsParser):
    open_tags = (CALLS_BEGIN,)
    section_end = CALLS_END
    call_begin = CALL_BEGIN
    call_end = CALL_END


@register_tool_parser("deepseek_v3")
class DeepSeekV3ToolParser(_DeepSeekToolParser):
    head_end = "{"
    head_end_is_arguments = True

    def _parse_head(self, head: str) -> tuple[str, str | None] | None:
        match = _V3_HEAD.fullmatch(head)
        return (match.group(1), None) if match else None


@register_tool_parser("deepseek_v31")
class DeepSeekV31ToolParser(_DeepSeekToolParser):
    head_end = SEPARATOR

    def _parse_head(self, head: str) -> tuple[str, str | None] | None:
        name = head.strip()
        return (name, None) if NAME.fullmatch(name) else None
