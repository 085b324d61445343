"""Reading TensorRT-LLM's responses back: the decoders of the `trtllm` (ensemble, text out) and
`tensorrt_llm` (token ids out) formats, which cut stop strings and tell the finish reason from
the token budget."""

from __future__ import annotations

import numpy as np

from .base import Decoder, GenerationOutput, GenerationRequest, RequestFormat, TokenLogprob, first_int
from .detokenize import IncrementalDetokenizer, StopStrings


class BudgetDecoder(Decoder):
    """Cuts stop strings and infers the finish reason from the token budget."""

    def __init__(self, request_format: RequestFormat, request: GenerationRequest):
        super().__init__(request_format, request)
        self.stops = StopStrings(request_format.stop_strings(request))
        self.stop_token_seen = False
        self.completion_tokens = 0

    @property
    def finished(self) -> bool:  # type: ignore[override]
        return self.stops.matched or self.stop_token_seen

    def _finish_reason(self) -> str:
        if self.finished:
            return "stop"
        return "length" if self.completion_tokens >= self.request.max_tokens else "stop"


class TrtllmDecoder(BudgetDecoder):
    def decode(self, outputs: dict[str, np.ndarray]) -> GenerationOutput:
        out = self.format.parse(outputs)
        if "num_output_tokens" not in outputs and outputs.get("text_output") is not None:
            # Models without token counts: a streamed response with text is one token (the
            # empty one at end_id holds none); a whole text is counted with the tokenizer.
            if self.request.stream:
                out.completion_tokens = 1 if out.text else 0
            elif self.format.options.tokenizer is not None:
                out.completion_tokens = len(self.format.options.tokenizer(out.text, add_special_tokens=False).input_ids)
        self.completion_tokens += out.completion_tokens
        out.text = self.stops.push(out.text)
        if self.stops.matched:
            out.finish_reason = "stop"
        return out

    def end(self) -> GenerationOutput | None:
        return GenerationOutput(text=self.stops.flush(), finish_reason=self._finish_reason())


class TensorRtLlmDecoder(BudgetDecoder):
    def __init__(self, request_format: RequestFormat, request: GenerationRequest):
        super().__init__(request_format, request)
        self.tokenizer = request_format.options.tokenizer
        # Special tokens stay in the text when a parser needs them (Mistral's [TOOL_CALLS]).
        self.text = IncrementalDetokenizer(self.tokenizer, request.sampling.get("skip_special_tokens", True))
        self.stop_token_ids = set(request_format.stop_token_ids(request))

    def decode(self, outputs: dict[str, np.ndarray]) -> GenerationOutput:
        ids = self._new_ids(outputs)
        if self.stop_token_ids:
            for position, token in enumerate(ids):
                if token in self.stop_token_ids:
                    ids = ids[:position]
                    self.stop_token_seen = True
                    break
        self.completion_tokens += len(ids)
        out = GenerationOutput(prompt_tokens=self.request.prompt_tokens, completion_tokens=len(ids))
        text = self.text.push(ids)
        if self.stop_token_seen:  # a stop token ended it: nothing more will come
            text += self.text.flush()
        out.text = self.stops.push(text)
        logprobs = outputs.get("output_log_probs")
        if self.request.logprobs is not None:
            values = logprobs.reshape(-1)[-len(ids):] if logprobs is not None and len(ids) else []
            out.logprobs = [
                TokenLogprob(token_id=token, token=self.tokenizer.decode([token]), logprob=float(value))
                for token, value in zip(ids, values)
            ]
        if self.finished:
            out.finish_reason = "stop"
        return out

    @staticmethod
    def _new_ids(outputs: dict[str, np.ndarray]) -> list[int]:
        output_ids = outputs.get("output_ids")
        if output_ids is None or not output_ids.size:
            return []
        ids = output_ids.reshape(-1, output_ids.shape[-1])[0]  # first (only) beam
        length = first_int(outputs.get("sequence_length"))
        if length is not None and 0 <= length <= len(ids):
            ids = ids[:length]
        return [int(token) for token in ids if token >= 0]

    def end(self) -> GenerationOutput | None:
        rest = self.stops.push(self.text.flush())
        return GenerationOutput(text=rest + self.stops.flush(), finish_reason=self._finish_reason())
