"""Generation outputs -> OpenAI `chat.completion.chunk` / `chat.completion` JSON strings.

The streaming layout is OpenAI's: per choice a first chunk with `delta.role` (and empty
content), then content deltas, then exactly one chunk with `finish_reason` and an empty
delta; with `stream_options.include_usage` every chunk has `"usage": null` and one last
chunk has `"choices": []` and the usage. Chunks are serialized compactly, with fields in
OpenAI's order; the fixed head of every chunk is serialized once per request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .backends import GenerationOutput

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "content_filter": "content_filter"}


def openai_finish_reason(engine_reason: str | None) -> str:
    """The engine's finish reason as OpenAI names it. The engine ending a stream without one means `stop`."""
    return FINISH_REASONS.get(engine_reason or "stop", "stop")


@dataclass
class ChoiceState:
    text: list[str] = field(default_factory=list)
    started: bool = False
    finish_reason: str | None = None
    completion_tokens: int = 0


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_dict(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


class ChatResponseBuilder:
    """Keeps the state of one chat completion and renders its JSON payloads."""

    def __init__(
        self,
        *,
        completion_id: str,
        created: int,
        model: str,
        system_fingerprint: str,
        choices: int = 1,
        prompt_tokens: int = 0,
        include_usage: bool = False,
    ):
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.system_fingerprint = system_fingerprint
        self.choices = [ChoiceState() for _ in range(choices)]
        self.prompt_tokens = prompt_tokens
        self.include_usage = include_usage
        head = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": system_fingerprint,
        }
        self._chunk_head = _dumps(head)[:-1] + ',"choices":['
        self._chunk_tail = '],"usage":null}' if include_usage else "]}"

    # ---- streaming -------------------------------------------------------------------
    def _chunk(self, choice: dict) -> str:
        return self._chunk_head + _dumps(choice) + self._chunk_tail

    def stream_output(self, index: int, output: GenerationOutput) -> list[str]:
        """The chunks that one (possibly merged) output of choice `index` adds to the stream."""
        state = self.choices[index]
        self._account(state, output)
        chunks = []
        if not state.started:
            state.started = True
            chunks.append(
                self._chunk(
                    {
                        "index": index,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                )
            )
        if output.text:
            chunks.append(
                self._chunk({"index": index, "delta": {"content": output.text}, "logprobs": None, "finish_reason": None})
            )
        return chunks

    def stream_finish(self, index: int) -> list[str]:
        """The role chunk if nothing was sent yet, then the one chunk carrying `finish_reason`."""
        state = self.choices[index]
        chunks = self.stream_output(index, GenerationOutput()) if not state.started else []
        chunks.append(
            self._chunk({"index": index, "delta": {}, "logprobs": None, "finish_reason": self._finish(state)})
        )
        return chunks

    def stream_usage(self) -> list[str]:
        """The trailing usage chunk, when the client asked for it."""
        if not self.include_usage:
            return []
        return [self._chunk_head + '],"usage":' + _dumps(self.usage().to_dict()) + "}"]

    # ---- non-streaming -----------------------------------------------------------------
    def add_output(self, index: int, output: GenerationOutput) -> None:
        state = self.choices[index]
        self._account(state, output)
        if output.text:
            state.text.append(output.text)

    def completion(self) -> str:
        choices = []
        for index, state in enumerate(self.choices):
            choices.append(
                {
                    "index": index,
                    "message": {"role": "assistant", "content": "".join(state.text), "refusal": None},
                    "logprobs": None,
                    "finish_reason": self._finish(state),
                }
            )
        return _dumps(
            {
                "id": self.completion_id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": self.system_fingerprint,
                "choices": choices,
                "usage": self.usage().to_dict(),
            }
        )

    # ---- shared --------------------------------------------------------------------------
    def _account(self, state: ChoiceState, output: GenerationOutput) -> None:
        state.completion_tokens += output.completion_tokens
        if output.finish_reason:
            state.finish_reason = output.finish_reason
        if output.prompt_tokens is not None:
            self.prompt_tokens = output.prompt_tokens

    @staticmethod
    def _finish(state: ChoiceState) -> str:
        return openai_finish_reason(state.finish_reason)

    def usage(self) -> Usage:
        return Usage(self.prompt_tokens, sum(state.completion_tokens for state in self.choices))
