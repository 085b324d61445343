"""Generation outputs -> OpenAI's Responses JSON: one `response` (whole), or its stream events.

The same generation outputs and parser deltas that chunks.py turns into chat chunks become
output items here: reasoning a `reasoning` item (`summary: []`, the text in `content` as
`reasoning_text`, as vLLM returns it), content a `message` item (one `output_text` part with
`annotations: []`), each tool call a `function_call` item (`call_id` the parser's call id,
arguments streamed as the model writes them); a new item starts whenever the kind changes. A
stream is

    response.created, response.in_progress,
    per item: response.output_item.added, (response.content_part.added,)
              deltas (response.output_text.delta, response.reasoning_text.delta,
                      response.function_call_arguments.delta),
              the done events (response.output_text.done / reasoning_text.done /
                      function_call_arguments.done, response.content_part.done),
              response.output_item.done
    response.completed, or response.incomplete (the token budget ran out: the open item's
    status is `incomplete` too)

one event per payload, each with its `type` first and its `sequence_number` (0, 1, ...). The
whole response holds the same items, built by the same code (`OutputItems`), so a stream
reassembled is the whole response (the one exception: text a model writes after a tool call
in the same turn streams as a second message item, and is part of the first message of a whole
response, where the parsers return all of the text at once).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

from ..choice_text import ChoiceText
from ..chunks import ChoiceState, ResponseBuilder
from ..formats import GenerationOutput
from ..parsers.base import Delta, ToolCallDelta

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
PREFIXES = {"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}
# The engine's finish reasons that leave a response incomplete, and OpenAI's reason for each.
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def item_id(kind: str) -> str:
    return PREFIXES[kind] + uuid.uuid4().hex


class OutputItems:
    """The output items of one answer as the parsers' deltas make them, and the stream events
    that build them. Within one delta: reasoning, the rest of the open call's arguments, content,
    then new calls (the order in which a model writes them)."""

    def __init__(self, sequence: Callable[[], int], make_id: Callable[[str], str] = item_id,
                 keep_reasoning: bool = True):
        self.sequence = sequence
        self.make_id = make_id
        self.keep_reasoning = keep_reasoning
        self.items: list[dict] = []  # each item as added (status in_progress, no text yet)
        self._pieces: list[list[str]] = []  # per item: its text, reasoning or arguments, in pieces
        self._status: list[str] = []
        self._open: str | None = None  # the kind of the open item
        self._call: int | None = None  # the parser's index of the call in the open function_call item

    def add(self, delta: Delta) -> list[str]:
        events = self._write("reasoning", delta.reasoning) if delta.reasoning and self.keep_reasoning else []
        pieces = delta.tool_calls
        continuing = {id(p) for p in pieces if p.id is None and self._open == "function_call" and p.index == self._call}
        for piece in pieces:
            if id(piece) in continuing:
                events += self._call_piece(piece)
        if delta.content:
            events += self._write("message", delta.content)
        for piece in pieces:
            if id(piece) not in continuing:
                events += self._call_piece(piece)
        return events

    def finish(self, incomplete: bool) -> list[str]:
        """Close the open item (`incomplete`: the budget cut it short)."""
        return self._close("incomplete" if incomplete else "completed")

    def output(self) -> list[dict]:
        return [self._done(index) for index in range(len(self.items))]

    # ---- items ---------------------------------------------------------------------------
    def _head(self, event: str) -> str:
        return f'{{"type":"{event}","sequence_number":{self.sequence()}'

    def _where(self, index: int, content: bool = True) -> str:
        where = f'"item_id":"{self.items[index]["id"]}","output_index":{index}'
        return where + ',"content_index":0' if content else where

    def _start(self, kind: str, **fields) -> list[str]:
        index = len(self.items)
        item = {"id": self.make_id(kind), "type": kind, "status": "in_progress", **fields}
        self.items.append(item)
        self._pieces.append([])
        self._status.append("in_progress")
        self._open = kind
        events = [f'{self._head("response.output_item.added")},"output_index":{index},"item":{_dumps(item)}}}']
        if kind != "function_call":
            events.append(f'{self._head("response.content_part.added")},{self._where(index)},'
                          f'"part":{_dumps(self._part(kind, ""))}}}')
        return events

    @staticmethod
    def _part(kind: str, text: str) -> dict:
        if kind == "message":
            return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
        return {"type": "reasoning_text", "text": text}

    def _done(self, index: int) -> dict:
        """Item `index` as it is once done."""
        item, text = self.items[index], "".join(self._pieces[index])
        done = {**item, "status": self._status[index]}
        if item["type"] == "function_call":
            done["arguments"] = text
        else:
            done["content"] = [self._part(item["type"], text)]
        return done

    def _close(self, status: str) -> list[str]:
        if self._open is None:
            return []
        index, kind = len(self.items) - 1, self._open
        self._open = self._call = None
        self._status[index] = status
        done = self._done(index)
        if kind == "function_call":
            events = [(f'{self._head("response.function_call_arguments.done")},{self._where(index, False)},'
                       f'"name":{_dumps(done["name"])},"arguments":{_dumps(done["arguments"])}}}')]
        else:
            part = done["content"][0]
            extra = ',"logprobs":[]' if kind == "message" else ""
            events = [(f'{self._head(f"response.{_text_kind(kind)}.done")},{self._where(index)},'
                       f'"text":{_dumps(part["text"])}{extra}}}'),
                      f'{self._head("response.content_part.done")},{self._where(index)},"part":{_dumps(part)}}}']
        events.append(f'{self._head("response.output_item.done")},"output_index":{index},"item":{_dumps(done)}}}')
        return events

    def _delta(self, kind: str, text: str) -> str:
        index = len(self.items) - 1
        self._pieces[index].append(text)
        if kind == "function_call":
            return (f'{self._head("response.function_call_arguments.delta")},{self._where(index, False)},'
                    f'"delta":{_dumps(text)}}}')
        extra = ',"logprobs":[]' if kind == "message" else ""
        return f'{self._head(f"response.{_text_kind(kind)}.delta")},{self._where(index)},"delta":{_dumps(text)}{extra}}}'

    def _write(self, kind: str, text: str) -> list[str]:
        events = []
        if self._open != kind:
            fields = {"content": [], "role": "assistant"} if kind == "message" else {"summary": []}
            events = self._close("completed") + self._start(kind, **fields)
        events.append(self._delta(kind, text))
        return events

    def _call_piece(self, piece: ToolCallDelta) -> list[str]:
        events = []
        if piece.id is not None:  # a new call: its complete name
            events = self._close("completed") + self._start("function_call", arguments="", call_id=piece.id,
                                                            name=piece.name)
            self._call = piece.index
        if piece.arguments and self._open == "function_call" and self._call == piece.index:
            events.append(self._delta("function_call", piece.arguments))
        return events


def _text_kind(kind: str) -> str:
    return "output_text" if kind == "message" else "reasoning_text"


class ResponsesBuilder(ResponseBuilder):
    """OpenAI's `response` and its stream events, for one answer (Responses has no `n`).
    `fields`: what the response echoes of its request (translate.response_fields);
    `count_tokens`: the tokenizer's count of a text, for `reasoning_tokens`."""

    def __init__(self, *, choice_text: Callable[[], ChoiceText] | None = None, fields: dict | None = None,
                 include_reasoning: bool = True, count_tokens: Callable[[str], int] | None = None,
                 make_id: Callable[[str], str] = item_id, clock: Callable[[], float] = time.time, **kwargs):
        super().__init__(**kwargs)
        if choice_text is not None:
            for state in self.choices:
                state.parser = choice_text()
        self.fields = fields or {}
        self.count_tokens = count_tokens
        self.clock = clock
        self._sequence = -1
        self._items = OutputItems(self._next, make_id, include_reasoning)
        self._reasoning: list[str] = []
        self._started = False

    def _next(self) -> int:
        self._sequence += 1
        return self._sequence

    # ---- streaming -------------------------------------------------------------------
    def stream_output(self, index: int, output: GenerationOutput) -> list[str]:
        state = self.choices[index]
        self._account(state, output)
        events = self._start()
        if output.text:
            events += self._items.add(self._feed(state, output.text))
        return events

    def stream_finish(self, index: int) -> list[str]:
        state = self.choices[index]
        events = self._start() + self._end(state)
        response = self._response(state)
        events.append(f'{{"type":"response.{response["status"]}","sequence_number":{self._next()},'
                      f'"response":{_dumps(response)}}}')
        return events

    def stream_usage(self) -> list[str]:
        return []  # the usage is in the last event's response

    def _start(self) -> list[str]:
        if self._started:
            return []
        self._started = True
        response = self._response(None)
        return [f'{{"type":"response.{kind}","sequence_number":{self._next()},"response":{_dumps(response)}}}'
                for kind in ("created", "in_progress")]

    # ---- whole -----------------------------------------------------------------------
    def completion(self) -> str:
        state = self.choices[0]
        text = "".join(state.text)
        if text:
            self._items.add(self._feed(state, text))
        self._end(state)
        return _dumps(self._response(state))

    # ---- shared ----------------------------------------------------------------------
    def _feed(self, state: ChoiceState, text: str) -> Delta:
        delta = state.parser.feed(text) if state.parser is not None else Delta(content=text)
        if delta.reasoning:
            self._reasoning.append(delta.reasoning)
        return delta

    def _end(self, state: ChoiceState) -> list[str]:
        """The rest of the answer's items (what the parsers held), then the open item closed."""
        events = []
        if state.parser is not None:
            rest = state.parser.finish()
            if rest.reasoning:
                self._reasoning.append(rest.reasoning)
            events = self._items.add(rest)
        return events + self._items.finish(state.finish_reason in INCOMPLETE)

    def _response(self, state: ChoiceState | None) -> dict:
        """The response object: in progress (`state` None), or finished with its output and usage."""
        fields = self.fields
        reason = INCOMPLETE.get(state.finish_reason) if state is not None else None
        status = "in_progress" if state is None else "incomplete" if reason else "completed"
        response = {
            "id": self.completion_id, "object": "response", "created_at": self.created, "status": status,
            "background": False, "completed_at": int(self.clock()) if status == "completed" else None,
            "error": None, "incomplete_details": {"reason": reason} if reason else None,
        }
        for key in ("instructions", "max_output_tokens", "max_tool_calls"):
            response[key] = fields.get(key)
        response["model"] = self.model
        response["output"] = self._items.output() if state is not None else []
        for key, value in fields.items():
            response.setdefault(key, value)
        response["usage"] = self._usage() if state is not None else None
        response["user"] = response.pop("user", None)
        response["metadata"] = response.pop("metadata", {})
        return response

    def _usage(self) -> dict:
        usage = self.usage()
        reasoning = "".join(self._reasoning)
        counted = self.count_tokens(reasoning) if reasoning and self.count_tokens is not None else 0
        return {"input_tokens": usage.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": min(counted, usage.completion_tokens)},
                "total_tokens": usage.prompt_tokens + usage.completion_tokens}
