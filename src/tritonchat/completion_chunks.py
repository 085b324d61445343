"""Generation outputs -> OpenAI JSON for (legacy) Completions: `text_completion` objects, streamed
or whole (the shared layout and accounting are in chunks.py)."""

from __future__ import annotations

from .chunks import ChoiceState, ResponseBuilder
from .formats import GenerationOutput, TokenLogprob


class CompletionResponseBuilder(ResponseBuilder):
    """`text_completion` objects, streamed and whole; `echo` puts the prompt in front."""

    chunk_object = "text_completion"
    object = "text_completion"

    def __init__(self, *, echo_text: str = "", **kwargs):
        super().__init__(**kwargs)
        self.echo_text = echo_text

    def stream_output(self, index: int, output: GenerationOutput) -> list[str]:
        state = self.choices[index]
        self._account(state, output)
        chunks = self._stream_echo(index)
        if output.text or output.logprobs:
            chunks.append(self._chunk(self._choice(index, output.text, self._logprobs(state, output.logprobs), None)))
        return chunks

    def _stream_echo(self, index: int) -> list[str]:
        state = self.choices[index]
        if state.started:
            return []
        state.started = True
        if not self.echo_text:
            return []
        state.text_length += len(self.echo_text)
        return [self._chunk(self._choice(index, self.echo_text, None, None))]

    def stream_finish(self, index: int) -> list[str]:
        state = self.choices[index]
        chunks = self._stream_echo(index)
        chunks.append(self._chunk(self._choice(index, "", None, self._finish(state))))
        return chunks

    def completion(self) -> str:
        choices = []
        for index, state in enumerate(self.choices):
            text = self.echo_text + "".join(state.text)
            state.text_length = len(self.echo_text)
            logprobs = self._logprobs(state, state.logprobs) if self.top_logprobs is not None else None
            choices.append(self._choice(index, text, logprobs, self._finish(state)))
        return self._whole(choices)

    @staticmethod
    def _choice(index: int, text: str, logprobs: dict | None, finish_reason: str | None) -> dict:
        return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish_reason}

    def _logprobs(self, state: ChoiceState, tokens: list[TokenLogprob] | None) -> dict | None:
        """OpenAI's legacy layout; text_offset counts characters from the start of the text."""
        if self.top_logprobs is None or tokens is None:
            return None
        result = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for token in tokens:
            result["tokens"].append(token.token)
            result["token_logprobs"].append(token.logprob)
            top = {text: max(logprob, -9999.0) for _id, text, logprob, _rank in self._top(token)}
            top.setdefault(token.token, token.logprob)
            result["top_logprobs"].append(top)
            result["text_offset"].append(state.text_length)
            state.text_length += len(token.token)
        return result
