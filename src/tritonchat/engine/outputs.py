"""vLLM's `RequestOutput`s as what each one adds: text, token count, log probabilities, and the
finish reason.

vLLM hands outputs over in one of two kinds (`RequestOutputKind`): CUMULATIVE (every output
holds everything so far; Triton's vLLM backend asks for these and computes deltas itself, which
`DeltaTracker` does for the local backend) or DELTA (every output holds only what is new, and
vLLM merges outputs that pile up before they are read: the in-process engine's kind, turned into
`GenerationOutput`s by `generation_output` without any tensors). FINAL_ONLY (one output at the
end, everything in it) reads like one DELTA output.

Log probabilities are, per generated token, a mapping token id -> vLLM `Logprob` (logprob, rank,
decoded_token) whose first entry is the sampled token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..formats import GenerationOutput, TokenLogprob


def logprobs_json(positions) -> bytes:
    """The vLLM backend's `logprobs` element: a JSON list, one dict per position,
    `{"<token_id>": {"logprob", "rank", "decoded_token"}}` in vLLM's order (sampled token first)."""
    return json.dumps([
        {str(token_id): {"logprob": entry.logprob, "rank": entry.rank, "decoded_token": entry.decoded_token}
         for token_id, entry in (position or {}).items()}
        for position in positions
    ]).encode("utf-8")


def token_logprobs(positions) -> list[TokenLogprob]:
    """The positions as the chat layer reads them: what `formats.vllm.parse_logprobs` reads from
    `logprobs_json(positions)`, without the JSON (logprobs below -9999, -inf too, become -9999)."""
    tokens = []
    for position in positions:
        items = list((position or {}).items())
        if not items:
            continue
        sampled_id, sampled = items[0]
        top = sorted(((int(token_id), entry.decoded_token or "", float(entry.logprob), int(entry.rank or 0))
                      for token_id, entry in items), key=lambda alternative: alternative[3])
        tokens.append(TokenLogprob(token_id=int(sampled_id), token=sampled.decoded_token or "",
                                   logprob=max(float(sampled.logprob), -9999.0), top=top))
    return tokens


def generation_output(request_output) -> GenerationOutput:
    """What one DELTA (or FINAL_ONLY) output of a one-sequence request adds, as the chat layer
    reads a response of the vLLM backend: new text, new tokens, their log probabilities (None
    when none were asked for), the prompt's length, and why the generation stopped (None until
    it did)."""
    out = request_output.outputs[0]
    logprobs = out.logprobs
    return GenerationOutput(
        text=out.text,
        finish_reason=out.finish_reason,
        prompt_tokens=len(request_output.prompt_token_ids or ()),
        completion_tokens=len(out.token_ids),
        logprobs=None if logprobs is None else token_logprobs(logprobs),
    )


class DeltaTracker:
    """How much of each sequence of one request's CUMULATIVE outputs was already handed on; each
    method returns, per sequence, what the latest output adds and moves its mark (text, log
    probabilities and token counts are followed apart, from their first use)."""

    def __init__(self) -> None:
        self._text: list[int] | None = None
        self._logprobs: list[int] | None = None
        self._tokens: list[int] | None = None

    def new_text(self, outputs: Sequence) -> list[str]:
        sent = self._text or [0] * len(outputs)
        self._text = [len(out.text) for out in outputs]
        return [out.text[start:] for out, start in zip(outputs, sent)]

    def new_logprobs(self, outputs: Sequence) -> list:
        """Per sequence its new positions, or None where it has no log probabilities."""
        sent = self._logprobs or [0] * len(outputs)
        new = []
        for i, out in enumerate(outputs):
            if out.logprobs is None:
                new.append(None)
                continue
            new.append(out.logprobs[sent[i]:])
            sent[i] = len(out.logprobs)
        self._logprobs = sent
        return new

    def new_token_counts(self, outputs: Sequence) -> list[int]:
        sent = self._tokens or [0] * len(outputs)
        self._tokens = [len(out.token_ids) for out in outputs]
        return [len(out.token_ids) - start for out, start in zip(outputs, sent)]
