"""Reasoning between `<think>` and `</think>`."""

from __future__ import annotations

from typing import ClassVar

from ..base import ReasoningParser
from ..tags import could_become, split_at_tag

START_TAG = "<think>"
END_TAG = "</think>"


class ThinkTagsReasoningParser(ReasoningParser):
    """`<think>reasoning</think>content`.

    - An opening `<think>` is recognised only at the very start (after whitespace, which
      is dropped with it). Without it, the reply starts in reasoning when
      `starts_in_reasoning` (the prompt opened `<think>`) or when the model family always
      does (`untagged_start_is_reasoning`), and in content otherwise.
    - Reasoning ends at the first `</think>`; everything after it is content, verbatim,
      including any further tags.
    - Tags split across pieces are held back, and released as text once they cannot be
      tags. A reply that ends inside reasoning keeps it all as reasoning.
    """

    untagged_start_is_reasoning: ClassVar[bool] = False

    def __init__(self, starts_in_reasoning: bool = False) -> None:
        super().__init__(starts_in_reasoning)
        self._stage = self._read_start

    def _read_start(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        if stripped.startswith(START_TAG):
            self._pending = stripped[len(START_TAG) :]
            self._stage = self._read_reasoning
        elif could_become(stripped, START_TAG) and not final:
            return False
        elif self.starts_in_reasoning or self.untagged_start_is_reasoning:
            self._stage = self._read_reasoning
        else:
            self._stage = self._read_content
        return True

    def _read_reasoning(self, final: bool) -> bool:
        reasoning, tag, rest = split_at_tag(self._pending, END_TAG)
        if final and tag is None:
            reasoning, rest = self._pending, ""
        self._emit_reasoning(reasoning)
        self._pending = rest
        if tag is None:
            return False
        self._stage = self._read_content
        return True

