"""Generation outputs -> Anthropic's Messages JSON: one `message` (whole), or its stream events.

The same generation outputs and parser deltas that chunks.py turns into OpenAI chunks become
content blocks here: reasoning a `thinking` block (signature ""), content a `text` block, each
tool call a `tool_use` block (id `toolu_...`, arguments streamed as `input_json_delta`); a new
block starts whenever the kind changes. A stream is

    message_start, (content_block_start, content_block_delta..., content_block_stop)...,
    message_delta (stop_reason, stop_sequence, usage), message_stop

one event per payload, each carrying its `type`. A whole message holds the same blocks, built by
the same code (`Blocks`), so a stream reassembled is the whole message. An answer without any
content is one empty text block, both ways.

Stop sequences: the vLLM backend does not say which stop string ended a generation, so the
engine is asked to keep it in the text (`include_stop_str_in_output`) and it is found here at the
end of the text, and cut (while streaming, text that may begin one is held back until it is clear).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import partial_json_parser
from partial_json_parser import Allow

from ..choice_text import ChoiceText
from ..chunks import ChoiceState, ResponseBuilder
from ..formats import GenerationOutput
from ..parsers.base import Delta, ToolCallDelta, random_alphanumerics

log = logging.getLogger(__name__)
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_unknown_reasons_seen: set[str] = set()
MESSAGE_STOP = '{"type":"message_stop"}'


def tool_use_id() -> str:
    return "toolu_" + random_alphanumerics(24)


def tool_input(arguments: str) -> dict | None:
    """A call's arguments as its `input` object; None when they are not a complete JSON object."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def partial_input(arguments: str) -> dict:
    """The `input` of a call whose arguments were cut short (by the token budget): parsed as far
    as they go, incomplete strings left out, as the `anthropic` SDK reads a stream's
    `partial_json`; {} for what is no JSON object at all."""
    try:
        value = partial_json_parser.loads(arguments, Allow.ALL & ~Allow.STR)
    except Exception:  # noqa: BLE001  (malformed: the model's own text, whatever it is)
        return {}
    return value if isinstance(value, dict) else {}


class StopSequences:
    """Finds the stop sequence a generation ended with. `push` holds back the longest tail that
    may begin (or be) a stop sequence; `end` releases it, or, when the engine stopped on a stop
    string, cuts the first stop sequence (in request order) the text ends with, as vLLM picks it."""

    def __init__(self, stops: tuple[str, ...] = ()):
        self.stops = [stop for stop in stops if stop]
        self._longest = max(map(len, self.stops), default=0)
        self._held = ""

    def push(self, text: str) -> str:
        if not self.stops:
            return text
        held = self._held + text
        keep = next((n for n in range(min(len(held), self._longest), 0, -1)
                     if any(stop.startswith(held[-n:]) for stop in self.stops)), 0)
        self._held = held[len(held) - keep:]
        return held[: len(held) - keep]

    def end(self, stopped: bool) -> tuple[str, str | None]:
        """(the text still held, the stop sequence it ended with or None)."""
        held, self._held = self._held, ""
        if stopped:
            for stop in self.stops:
                if held.endswith(stop):
                    return held[: -len(stop)], stop
        return held, None


class Blocks:
    """The content blocks of one answer as the parsers' deltas make them, and the stream events
    that build them. Within one delta: reasoning, the rest of the open call's arguments, content,
    then new calls (the order in which a model writes them)."""

    def __init__(self, make_id: Callable[[], str] = tool_use_id):
        self.make_id = make_id
        self.blocks: list[dict] = []
        self._pieces: list[list[str]] = []  # per block: its text, thinking or arguments, in pieces
        self._open: str | None = None  # the kind of the open block
        self._call: int | None = None  # the parser's index of the call in the open tool_use block

    def add(self, delta: Delta) -> list[str]:
        events = self._write("thinking", delta.reasoning) if delta.reasoning else []
        pieces = delta.tool_calls
        continuing = {id(p) for p in pieces if p.id is None and self._open == "tool_use" and p.index == self._call}
        for piece in pieces:
            if id(piece) in continuing:
                events += self._call_piece(piece)
        if delta.content:
            events += self._write("text", delta.content)
        for piece in pieces:
            if id(piece) not in continuing:
                events += self._call_piece(piece)
        return events

    def finish(self) -> list[str]:
        """Close the open block; an answer without blocks gets an empty text block."""
        events = self._close()
        if not self.blocks:
            events += self._start({"type": "text", "text": ""}) + self._close()
        return events

    def content(self) -> list[dict]:
        """The blocks as a whole message holds them (a tool_use block's input parsed)."""
        out = []
        for block, pieces in zip(self.blocks, self._pieces):
            kind = block["type"]
            if kind == "tool_use":
                arguments = "".join(pieces)
                complete = tool_input(arguments)
                out.append({**block, "input": complete if complete is not None else partial_input(arguments)})
            else:
                out.append({**block, kind: "".join(pieces)})
        return out

    def _start(self, block: dict) -> list[str]:
        index = len(self.blocks)
        self.blocks.append(block)
        self._pieces.append([])
        self._open = block["type"]
        return [f'{{"type":"content_block_start","index":{index},"content_block":{_dumps(block)}}}']

    def _close(self) -> list[str]:
        if self._open is None:
            return []
        self._open = self._call = None
        return [f'{{"type":"content_block_stop","index":{len(self.blocks) - 1}}}']

    def _delta(self, kind: str, field: str, text: str) -> str:
        self._pieces[-1].append(text)
        return (f'{{"type":"content_block_delta","index":{len(self.blocks) - 1},'
                f'"delta":{{"type":"{kind}","{field}":{_dumps(text)}}}}}')

    def _write(self, kind: str, text: str) -> list[str]:
        events = []
        if self._open != kind:
            block = {"type": kind, kind: ""}
            if kind == "thinking":
                block["signature"] = ""
            events = self._close() + self._start(block)
        events.append(self._delta(f"{kind}_delta", kind, text))
        return events

    def _call_piece(self, piece: ToolCallDelta) -> list[str]:
        events = []
        if piece.id is not None:  # a new call: its complete name
            events = self._close() + self._start({"type": "tool_use", "id": self.make_id(), "name": piece.name,
                                                  "input": {}})
            self._call = piece.index
        if piece.arguments:
            if self._open == "tool_use" and self._call == piece.index:
                events.append(self._delta("input_json_delta", "partial_json", piece.arguments))
            else:  # parsers stream one call at a time; a block once closed cannot grow
                log.warning("arguments of tool call %d arrived after its block closed; dropped", piece.index)
        return events


class MessageBuilder(ResponseBuilder):
    """Anthropic's `message` and its stream events, for one answer (Messages has no `n`)."""

    def __init__(self, *, choice_text: Callable[[], ChoiceText] | None = None,
                 stop_sequences: tuple[str, ...] = (), **kwargs):
        super().__init__(**kwargs)
        if choice_text is not None:
            for state in self.choices:
                state.parser = choice_text()
        self._stops = StopSequences(tuple(stop_sequences))
        self._blocks = Blocks()
        self._started = False
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None

    # ---- streaming -------------------------------------------------------------------
    def stream_output(self, index: int, output: GenerationOutput) -> list[str]:
        state = self.choices[index]
        self._account(state, output)
        events = self._message_start()
        text = self._stops.push(output.text)
        if text:
            events += self._blocks.add(self._feed(state, text))
        return events

    def stream_finish(self, index: int) -> list[str]:
        state = self.choices[index]
        events = self._message_start() + self._end(state)
        delta = {"stop_reason": self._stop_reason, "stop_sequence": self._stop_sequence}
        events.append(f'{{"type":"message_delta","delta":{_dumps(delta)},"usage":{_dumps(self._usage())}}}')
        events.append(MESSAGE_STOP)
        return events

    def stream_usage(self) -> list[str]:
        return []  # the usage is in message_delta

    def _message_start(self) -> list[str]:
        if self._started:
            return []
        self._started = True
        return [_dumps({"type": "message_start", "message": self._message([], None, None)})]

    # ---- whole -----------------------------------------------------------------------
    def completion(self) -> str:
        state = self.choices[0]
        text = self._stops.push("".join(state.text))
        if text:
            self._blocks.add(self._feed(state, text))
        self._end(state)
        return _dumps(self._message(self._blocks.content(), self._stop_reason, self._stop_sequence))

    # ---- shared ----------------------------------------------------------------------
    def _end(self, state: ChoiceState) -> list[str]:
        """The rest of the answer's blocks (held text, what the parsers held), and its stop reason."""
        text, self._stop_sequence = self._stops.end(state.finish_reason == "stop")
        events = self._blocks.add(self._feed(state, text)) if text else []
        if state.parser is not None:
            events += self._blocks.add(state.parser.finish())
        events += self._blocks.finish()
        self._stop_reason = self._reason(state)
        return events

    @staticmethod
    def _feed(state: ChoiceState, text: str) -> Delta:
        return state.parser.feed(text) if state.parser is not None else Delta(content=text)

    def _reason(self, state: ChoiceState) -> str:
        """Anthropic's stop_reason. The token budget wins; then calls whose arguments are complete
        (`tool_use`, also for a named tool_choice); then a stop sequence (which may have cut a call
        short: such a call must not run); then any call; else the end of the turn."""
        reason = state.finish_reason
        if reason == "length":
            return "max_tokens"
        calls = state.parser.calls if state.parser is not None else []
        if calls and all(tool_input(call.arguments) is not None for call in calls):
            return "tool_use"
        if self._stop_sequence is not None:
            return "stop_sequence"
        if calls:
            return "tool_use"
        if reason == "content_filter":
            return "refusal"
        if reason not in (None, "stop", "tool_calls") and reason not in _unknown_reasons_seen:
            _unknown_reasons_seen.add(reason)
            log.warning("the generation model finished an answer with %r, which Anthropic's API does not have; "
                        "reported as end_turn", reason)
        return "end_turn"

    def finish_reason(self, index: int) -> str:
        return self._stop_reason or self._reason(self.choices[index])

    def _usage(self) -> dict:
        usage = self.usage()
        return {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens}

    def _message(self, content: list, stop_reason: str | None, stop_sequence: str | None) -> dict:
        return {"id": self.completion_id, "type": "message", "role": "assistant", "model": self.model,
                "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
                "usage": self._usage()}
