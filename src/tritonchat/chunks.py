"""Generation outputs -> OpenAI JSON: chat completions, streamed or whole, and what every
builder shares (Completions' builder is in completion_chunks.py, Anthropic's in anthropic/).

Streaming follows OpenAI's layout. Chat: per choice a first chunk with `delta.role` (and
empty content), then content deltas, then exactly one chunk with `finish_reason` and an
empty delta. Completions: text deltas, then exactly one chunk with `finish_reason` and
empty text. With `stream_options.include_usage` every chunk has `"usage": null` (or the
running usage with `continuous_usage_stats`) and one last chunk has `"choices": []` and the
usage. Chunks are serialized compactly, with fields in OpenAI's order; the fixed head of
every chunk is serialized once per request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from .formats import GenerationOutput, TokenLogprob
from .choice_text import ChoiceText
from .parsers.base import Delta, ToolCall, ToolCallDelta

log = logging.getLogger(__name__)
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")
_unknown_reasons_seen: set[str] = set()

TokenBytesFn = Callable[[int, str], list[int]]


def openai_finish_reason(engine_reason: str | None) -> str:
    """The engine's finish reason as OpenAI names it. The engine ending a stream without one means
    `stop`; a reason OpenAI does not have (vLLM's `abort`) is passed on as it is, as vLLM's own
    server does, never passed off as `stop` (and logged, once per reason)."""
    if not engine_reason:
        return "stop"
    if engine_reason not in FINISH_REASONS and engine_reason not in _unknown_reasons_seen:
        _unknown_reasons_seen.add(engine_reason)
        log.warning("the generation model finished a choice with %r, which OpenAI's API does not have; "
                    "passed on as it is", engine_reason)
    return engine_reason


def _utf8(token_id: int, text: str) -> list[int]:
    return list(text.encode("utf-8"))


@dataclass
class ChoiceState:
    parser: ChoiceText | None = None  # reasoning / tool-call parsing of this choice's text
    text: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    started: bool = False
    finish_reason: str | None = None
    completion_tokens: int = 0
    text_length: int = 0  # characters sent so far (completions' text_offset)


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


class ResponseBuilder:
    """State of one request's response, shared by the chat and completions layouts."""

    chunk_object = ""
    object = ""

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
        continuous_usage: bool = False,
        top_logprobs: int | None = None,
        token_bytes: TokenBytesFn | None = None,
    ):
        self.completion_id = completion_id
        self.created = created
        self.model = model
        self.system_fingerprint = system_fingerprint
        self.choices = [ChoiceState() for _ in range(choices)]
        self.prompt_tokens = prompt_tokens
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.top_logprobs = top_logprobs
        self.token_bytes = token_bytes or _utf8
        head = {
            "id": completion_id,
            "object": self.chunk_object,
            "created": created,
            "model": model,
            "system_fingerprint": system_fingerprint,
        }
        self._chunk_head = _dumps(head)[:-1] + ',"choices":['

    # ---- streaming -------------------------------------------------------------------
    def _chunk(self, choice: dict) -> str:
        if self.continuous_usage:
            tail = '],"usage":' + _dumps(self.usage().to_dict()) + "}"
        elif self.include_usage:
            tail = '],"usage":null}'
        else:
            tail = "]}"
        return self._chunk_head + _dumps(choice) + tail

    def stream_output(self, index: int, output: GenerationOutput) -> list[str]:
        raise NotImplementedError

    def stream_finish(self, index: int) -> list[str]:
        raise NotImplementedError

    def stream_usage(self) -> list[str]:
        """The trailing usage chunk, when the client asked for it."""
        if not self.include_usage:
            return []
        return [self._chunk_head + '],"usage":' + _dumps(self.usage().to_dict()) + "}"]

    # ---- non-streaming ---------------------------------------------------------------
    def _whole(self, choices: list[dict]) -> str:
        """The non-streaming response around its choices."""
        return _dumps(
            {
                "id": self.completion_id,
                "object": self.object,
                "created": self.created,
                "model": self.model,
                "system_fingerprint": self.system_fingerprint,
                "choices": choices,
                "usage": self.usage().to_dict(),
            }
        )

    def add_output(self, index: int, output: GenerationOutput) -> None:
        state = self.choices[index]
        self._account(state, output)
        if output.text:
            state.text.append(output.text)
        if output.logprobs:
            state.logprobs.extend(output.logprobs)

    def completion(self) -> str:
        raise NotImplementedError

    # ---- shared ------------------------------------------------------------------------
    def _account(self, state: ChoiceState, output: GenerationOutput) -> None:
        state.completion_tokens += output.completion_tokens
        if output.finish_reason:
            state.finish_reason = output.finish_reason
        if output.prompt_tokens is not None:
            self.prompt_tokens = output.prompt_tokens

    def _finish(self, state: ChoiceState) -> str:
        return openai_finish_reason(state.finish_reason)

    def finish_reason(self, index: int) -> str:
        """Choice `index`'s finish_reason as the response reports it."""
        return self._finish(self.choices[index])

    def usage(self) -> Usage:
        return Usage(self.prompt_tokens, sum(state.completion_tokens for state in self.choices))

    def _top(self, token: TokenLogprob) -> list[tuple[int, str, float, int]]:
        k = self.top_logprobs or 0
        return [entry for entry in token.top if 1 <= entry[3] <= k][:k]


class ChatResponseBuilder(ResponseBuilder):
    """`chat.completion.chunk` and `chat.completion`, with reasoning and tool calls when the
    choice's text is parsed (`choice_text`)."""

    chunk_object = "chat.completion.chunk"
    object = "chat.completion"

    def __init__(
        self,
        *,
        choice_text: Callable[[], ChoiceText] | None = None,
        reasoning_field: str = "reasoning",  # "": reasoning left out (include_reasoning false)
        calls_finish_reason: str | None = "tool_calls",
        echo_text: str = "",  # vLLM's `echo`: the content each answer starts with
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.reasoning_field = reasoning_field
        self.echo_text = echo_text
        # The finish_reason of a choice that made tool calls (None: the engine's own).
        self.calls_finish_reason = calls_finish_reason
        if choice_text is not None:
            for state in self.choices:
                state.parser = choice_text()

    def stream_output(self, index: int, output: GenerationOutput) -> list[str]:
        """The chunks that one (possibly merged) output of choice `index` adds to the stream."""
        state = self.choices[index]
        self._account(state, output)
        chunks = self.stream_role(index)
        delta = self._shown(state.parser.feed(output.text) if state.parser is not None else Delta(content=output.text))
        if delta or output.logprobs:
            chunks.append(self._delta_chunk(index, delta, output.logprobs))
        return chunks

    def stream_role(self, index: int) -> list[str]:
        """The first chunk of a choice (role and empty content), once; then the echoed text, if any."""
        state = self.choices[index]
        if state.started:
            return []
        state.started = True
        chunks = [self._chunk({"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                               "finish_reason": None})]
        if self.echo_text:
            chunks.append(self._chunk({"index": index, "delta": {"content": self.echo_text}, "logprobs": None,
                                       "finish_reason": None}))
        return chunks

    def stream_finish(self, index: int) -> list[str]:
        """Whatever the parsers held back, then the one chunk carrying `finish_reason`."""
        state = self.choices[index]
        chunks = self.stream_role(index)
        if state.parser is not None:
            delta = self._shown(state.parser.finish())
            if delta:
                chunks.append(self._delta_chunk(index, delta, None))
        chunks.append(self._chunk({"index": index, "delta": {}, "logprobs": None, "finish_reason": self._finish(state)}))
        return chunks

    def _shown(self, delta: Delta) -> Delta:
        """`delta` without its reasoning when the request asked for none (`include_reasoning: false`)."""
        if delta.reasoning and not self.reasoning_field:
            return Delta(content=delta.content, tool_calls=delta.tool_calls)
        return delta

    def _delta_chunk(self, index: int, delta: Delta, logprobs: list[TokenLogprob] | None) -> str:
        body: dict = {}
        if delta.reasoning:
            body[self.reasoning_field] = delta.reasoning
        if delta.content or not (delta.reasoning or delta.tool_calls):
            body["content"] = delta.content
        if delta.tool_calls:
            body["tool_calls"] = [_call_delta(piece) for piece in delta.tool_calls]
        return self._chunk({"index": index, "delta": body, "logprobs": self._logprobs(logprobs), "finish_reason": None})

    def _finish(self, state: ChoiceState) -> str:
        if state.parser is not None and state.parser.calls and self.calls_finish_reason:
            return self.calls_finish_reason
        return openai_finish_reason(state.finish_reason)

    def completion(self) -> str:
        choices = []
        for index, state in enumerate(self.choices):
            choices.append(
                {
                    "index": index,
                    "message": self._message(state),
                    "logprobs": self._logprobs(state.logprobs) if self.top_logprobs is not None else None,
                    "finish_reason": self._finish(state),
                }
            )
        return self._whole(choices)

    def _message(self, state: ChoiceState) -> dict:
        text = "".join(state.text)
        if state.parser is None:
            return {"role": "assistant", "content": self.echo_text + text, "refusal": None}
        parsed = state.parser.parse(text)
        content = parsed.content if parsed.content is not None else (None if parsed.tool_calls else "")
        if self.echo_text:
            content = self.echo_text + (content or "")
        message = {"role": "assistant", "content": content, "refusal": None}
        if parsed.tool_calls:
            message["tool_calls"] = [_call(call) for call in parsed.tool_calls]
        if state.parser.reads_reasoning and self.reasoning_field:
            message[self.reasoning_field] = parsed.reasoning
        return message

    def _logprobs(self, tokens: list[TokenLogprob] | None) -> dict | None:
        if self.top_logprobs is None or tokens is None:
            return None
        return {"content": [self._entry(token) for token in tokens], "refusal": None}

    def _entry(self, token: TokenLogprob) -> dict:
        return {
            "token": token.token,
            "logprob": token.logprob,
            "bytes": self.token_bytes(token.token_id, token.token),
            "top_logprobs": [
                {"token": text, "logprob": max(logprob, -9999.0), "bytes": self.token_bytes(token_id, text)}
                for token_id, text, logprob, _rank in self._top(token)
            ],
        }


def _call(call: ToolCall) -> dict:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _call_delta(piece: ToolCallDelta) -> dict:
    """First piece of a call: index, id, type and the whole name; later: argument fragments only."""
    if piece.id is not None:
        return {
            "index": piece.index,
            "id": piece.id,
            "type": "function",
            "function": {"name": piece.name, "arguments": piece.arguments},
        }
    return {"index": piece.index, "function": {"arguments": piece.arguments}}
