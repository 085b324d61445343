"""DeepSeek-R1 (and its distills): `<think>reasoning</think>content`.

Its chat templates end the prompt with `<think>\n`, so the reply usually starts inside the
reasoning with no opening tag; a reply without tags is therefore all reasoning (as in
vLLM), whatever `starts_in_reasoning` says.
"""

from __future__ import annotations

from ..base import register_reasoning_parser
from .think_tags import ThinkTagsReasoningParser


@register_reasoning_parser("deepseek_r1")
class DeepSeekR1ReasoningParser(ThinkTagsReasoningParser):
    untagged_start_is_reasoning = True
