"""Text handling the TensorRT-LLM formats need and vLLM does itself: incremental
detokenization of streamed token ids, and stop strings cut out of the output."""

from __future__ import annotations


class IncrementalDetokenizer:
    """Token ids in, new text out, with spaces and multi-byte characters right.

    Decoding one token alone loses a leading space (SentencePiece) and splits characters
    that span tokens (byte-level BPE); so each step decodes a short window that starts
    before the new tokens and emits only what the window added, holding back text that
    still ends in an incomplete character.
    """

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._prefix = 0  # window start: ids before it are final text
        self._read = 0  # ids up to here have been turned into emitted text

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, ids) -> str:
        self.ids.extend(int(i) for i in ids)
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.ids)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """At the end: whatever is left, incomplete characters included."""
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return after[len(before) :]


class StopStrings:
    """Cuts the output at the first stop string, which is not part of the output (OpenAI).

    Text that could be the start of a stop string is held back until it is clear.
    """

    def __init__(self, stops: list[str] | None):
        self.stops = [stop for stop in stops or [] if stop]
        self._pending = ""
        self.matched = False

    def push(self, text: str) -> str:
        if self.matched or not self.stops:
            return "" if self.matched else text
        if not text:
            return ""
        self._pending += text
        hits = [i for i in (self._pending.find(stop) for stop in self.stops) if i >= 0]
        if hits:
            out, self._pending, self.matched = self._pending[: min(hits)], "", True
            return out
        keep = self._longest_partial_stop()
        out = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        return out

    def _longest_partial_stop(self) -> int:
        for length in range(min(len(self._pending), max(map(len, self.stops)) - 1), 0, -1):
            tail = self._pending[-length:]
            if any(stop.startswith(tail) for stop in self.stops):
                return length
        return 0

    def flush(self) -> str:
        out, self._pending = ("" if self.matched else self._pending), ""
        return out
