"""Qwen3 (and QwQ): `<think>reasoning</think>content`, where the think block may be absent.

- Without `starts_in_reasoning`, a reply that does not open with `<think>` is all content
  (thinking disabled, or a model that does not think).
- With `starts_in_reasoning=True` (the prompt already opened `<think>`, as the
  Qwen3-Thinking-2507 and QwQ templates do), the reply is reasoning until `</think>`.
- A `<tool_call>` inside the reasoning does not end it here; tool calls are read from the
  content only.
"""

from __future__ import annotations

from ..base import register_reasoning_parser
from .think_tags import ThinkTagsReasoningParser


@register_reasoning_parser("qwen3")
class Qwen3ReasoningParser(ThinkTagsReasoningParser):
    untagged_start_is_reasoning = False
