"""Turns generation outputs into OpenAI payloads and sends them, on a few sending threads
("lanes", `responder_threads`) per model instance; each request stays on one lane.

Producers (one per choice: the `pump` coroutine on the event loop, whatever the transport)
only parse each generation response and hand it over with `output`, `end` or `fail`. The
request's lane does everything else, in order, for each of its open requests:
builds chunks, sends them (`send()` is a blocking call), checks whether clients went
away, abandons requests whose generation model went silent, and sends each request's
single final response. Outputs that pile up while a send is in progress are merged
into one chunk, so a busy instance sends fewer, larger chunks instead of falling behind.
With a stream interval N > 1 (vLLM's `stream_interval`) a choice's outputs are also held
back until they add up to N tokens: its first output goes out at once, and what is held goes
out before the choice ends or fails, so the text a client assembles is the same.
Because only its lane sends, asks `is_cancelled()` and finishes a request, no request
can be asked about cancellation after its final response (which would touch freed memory
in Triton).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Protocol

from .errors import CancelledError, InternalError, OpenAIError, UnavailableError
from .formats import Decoder, GenerationOutput
from .chunks import ChatResponseBuilder
from .transports.base import TargetStream

log = logging.getLogger(__name__)

# The stages of a request's first token (RequestState.first_token_stages), in order.
FIRST_TOKEN_STAGES = ("prepare", "wait", "handoff", "send")


class Sink(Protocol):
    """Where a request's responses go (Triton's response sender)."""

    def send(self, payload: str, final: bool) -> None: ...

    def send_error(self, error: OpenAIError) -> None: ...

    def is_cancelled(self) -> bool: ...


class Observer(Protocol):
    """Told when a request ends (metrics); called on a sender thread."""

    def request_finished(self, state: RequestState, outcome: str, error: OpenAIError | None) -> None: ...


class RequestState:
    """One request as the sender sees it. Only the sender thread changes it."""

    def __init__(
        self,
        builder: ChatResponseBuilder,
        sink: Sink,
        *,
        stream: bool,
        stream_interval: int = 1,
        choices: int = 1,
        name: str = "",
        require_finish_reason: bool = False,
        arrived: float | None = None,
    ):
        self.builder = builder
        self.sink = sink
        self.stream = stream
        # Tokens per chunk at least, after a choice's first; outputs held until then, by choice.
        self.stream_interval = stream_interval if stream else 1
        self.held: dict[int, GenerationOutput] = {}
        self.held_tokens: dict[int, int] = {}
        self.streaming: set[int] = set()  # choices whose first output went out
        self.name = name or builder.completion_id
        self.require_finish_reason = require_finish_reason
        self.pending = choices
        self.done = False  # read by producers to stop early
        self.outcome: str | None = None  # "completed", "cancelled", "error"
        self.cancel_hooks: list[Callable[[], None]] = []
        self.lane = None  # set by Sender.start
        self.last_activity = 0.0
        self.last_cancel_check = 0.0
        # When the request arrived, and when its first and latest generated output went out
        # (time.monotonic), for first-token and per-token latency.
        self.arrived = time.monotonic() if arrived is None else arrived
        self.first_output_at: float | None = None
        self.last_output_at: float | None = None
        # The first token's way, for its breakdown (`first_token_stages`): when the request was
        # prepared (prompt rendered, calls built), when the first event of the generation model
        # was received, and when the first output's chunks were sent.
        self.prepared_at: float | None = None
        self.first_event_at: float | None = None
        self.first_sent_at: float | None = None

    def first_token_stages(self) -> dict[str, float] | None:
        """Seconds from arrival to the first chunk sent, in four stages, or None for a request
        whose first output never went out: `prepare` (arrival to calls built: parsing, the
        template, tokenizing), `wait` (to the first event received: the loopback request and the
        engine's own first token), `handoff` (to the sender's lane taking it) and `send`
        (building and sending its chunks)."""
        marks = (self.arrived, self.prepared_at, self.first_event_at, self.first_output_at, self.first_sent_at)
        if any(mark is None for mark in marks):
            return None
        return {stage: max(0.0, later - earlier)
                for stage, earlier, later in zip(FIRST_TOKEN_STAGES, marks, marks[1:])}

    def add_cancel_hook(self, hook: Callable[[], None]) -> None:
        self.cancel_hooks.append(hook)


_OUTPUT, _END, _FAIL, _START = range(4)


def _token_count(output: GenerationOutput) -> int:
    """Tokens one output adds, for the stream interval (one when the format does not count them)."""
    return output.completion_tokens or (1 if output.text else 0)


class Sender:
    """The sending threads ("lanes") of one model instance; each request stays on one lane."""

    def __init__(
        self,
        cancel_check_interval: float = 0.1,
        idle_timeout: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        lanes: int = 1,
        observer: Observer | None = None,
    ):
        self._lanes = [_Lane(cancel_check_interval, idle_timeout, clock, i, observer) for i in range(max(1, lanes))]
        self._next = 0

    # ---- called from producers (any thread) ----------------------------------------------
    def start(self, state: RequestState) -> None:
        lane = self._lanes[self._next % len(self._lanes)]
        self._next += 1
        state.lane = lane
        lane.put((_START, state, 0, None))

    def output(self, state: RequestState, index: int, output: GenerationOutput) -> None:
        state.lane.put((_OUTPUT, state, index, output))

    def end(self, state: RequestState, index: int) -> None:
        state.lane.put((_END, state, index, None))

    def fail(self, state: RequestState, error: OpenAIError) -> None:
        state.lane.put((_FAIL, state, 0, error))

    @property
    def open_requests(self) -> int:
        return sum(len(lane.open) for lane in self._lanes)

    def stop(self) -> None:
        for lane in self._lanes:
            lane.stop()


class _Lane:
    """One sending thread and the requests assigned to it."""

    def __init__(self, cancel_check_interval: float, idle_timeout: float, clock: Callable[[], float], number: int,
                 observer: Observer | None = None):
        self.observer = observer
        self.cancel_check_interval = cancel_check_interval
        self.idle_timeout = idle_timeout
        self.clock = clock
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self.put = self._events.put
        self.open: dict[int, RequestState] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"chat-sender-{number}")
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._events.put(None)

    # ---- the sender thread --------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopped:
            try:
                first = self._events.get(timeout=self._poll_interval())
            except queue.Empty:
                first = None
            batch = [first] if first is not None else []
            while True:  # take whatever else is already waiting, to merge it
                try:
                    item = self._events.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    batch.append(item)
            try:
                self._handle(batch)
                self._check_open_requests()
            except Exception:  # noqa: BLE001  (this thread must survive anything)
                log.exception("sender failed on a batch")

    def _poll_interval(self) -> float:
        interval = self.cancel_check_interval
        if self.idle_timeout:
            interval = min(interval, self.idle_timeout)
        return max(0.005, interval / 2)

    def _handle(self, batch: list) -> None:
        merged: dict[tuple[int, int], GenerationOutput] = {}
        order: list[tuple[RequestState, int]] = []
        for kind, state, index, value in batch:
            if kind == _START:
                state.last_activity = state.last_cancel_check = self.clock()
                self.open[id(state)] = state
                continue
            if state.done:
                continue
            key = (id(state), index)
            if kind == _OUTPUT:
                if state.stream_interval > 1:
                    state.held_tokens[index] = state.held_tokens.get(index, 0) + _token_count(value)
                if key in merged:
                    merged[key] = merged[key].merge(value)
                else:
                    merged[key] = value
                    order.append((state, index))
                continue
            # An end or a failure: what arrived before it goes out first.
            self._flush(merged, order, only=state)
            self._release_held(state, index if kind == _END else None)
            if state.done:
                continue
            if kind == _END:
                self._end(state, index)
            else:
                self._finish_with_error(state, value, "error")
        self._flush(merged, order)

    def _flush(self, merged: dict, order: list, only: RequestState | None = None) -> None:
        keep = []
        for state, index in order:
            if only is not None and state is not only:
                keep.append((state, index))
                continue
            output = merged.pop((id(state), index), None)
            if output is None or state.done:
                continue
            if state.stream_interval > 1:
                held = state.held.pop(index, None)
                if held is not None:
                    output = held.merge(output)
                if only is None and index in state.streaming and state.held_tokens[index] < state.stream_interval:
                    state.held[index] = output
                    continue
                state.held_tokens[index] = 0
                if output.text or output.completion_tokens:
                    state.streaming.add(index)
            self._deliver(state, index, output)
        order[:] = keep

    def _release_held(self, state: RequestState, index: int | None = None) -> None:
        """What the stream interval held back of one choice before it ends (of all, before a failure)."""
        for held_index in [index] if index is not None else sorted(state.held):
            output = state.held.pop(held_index, None)
            if output is not None and not state.done:
                state.held_tokens[held_index] = 0
                self._deliver(state, held_index, output)

    def _deliver(self, state: RequestState, index: int, output: GenerationOutput) -> None:
        state.last_activity = self.clock()
        if output.text or output.completion_tokens:
            now = time.monotonic()
            if state.first_output_at is None:
                state.first_output_at = now
            state.last_output_at = now
        if not state.stream:
            state.builder.add_output(index, output)
            return
        try:
            for payload in state.builder.stream_output(index, output):
                state.sink.send(payload, final=False)
            if state.first_sent_at is None and state.first_output_at is not None:
                state.first_sent_at = time.monotonic()
        except Exception as exc:  # noqa: BLE001
            log.exception("%s: sending failed", state.name)
            self._finish_with_error(state, InternalError(f"Internal error while streaming the response: {exc}"), "error")

    def _end(self, state: RequestState, index: int) -> None:
        if state.require_finish_reason and state.builder.choices[index].finish_reason is None:
            # The generation model says why it stopped on its last response; a stream that
            # ends without one lost that response (and with it, maybe an error).
            error = InternalError("The generation model ended the stream without finishing it.")
            self._finish_with_error(state, error, "error")
            return
        state.pending -= 1
        try:
            payloads = state.builder.stream_finish(index) if state.stream else []
            if state.pending == 0:
                payloads += state.builder.stream_usage() if state.stream else [state.builder.completion()]
            last = len(payloads) - 1
            for i, payload in enumerate(payloads):
                final = state.pending == 0 and i == last
                if final:
                    self._close(state, "completed")
                state.sink.send(payload, final=final)
        except Exception as exc:  # noqa: BLE001
            log.exception("%s: finishing failed", state.name)
            self._finish_with_error(state, InternalError(f"Internal error while finishing the response: {exc}"), "error")

    def _finish_with_error(self, state: RequestState, error: OpenAIError, outcome: str) -> None:
        if state.done:
            return
        self._close(state, outcome, error)
        level = logging.INFO if outcome == "cancelled" else logging.WARNING
        log.log(level, "%s: %s", state.name, error.message)
        for hook in state.cancel_hooks:
            try:
                hook()
            except Exception:  # noqa: BLE001
                log.exception("%s: cancelling a generation failed", state.name)
        try:
            state.sink.send_error(error)
        except Exception:  # noqa: BLE001
            log.exception("%s: could not send the error response", state.name)

    def _close(self, state: RequestState, outcome: str, error: OpenAIError | None = None) -> None:
        state.done = True
        state.outcome = outcome
        self.open.pop(id(state), None)
        if self.observer is not None:
            try:
                self.observer.request_finished(state, outcome, error)
            except Exception:  # noqa: BLE001  (metrics must never break a request)
                log.exception("%s: could not record the request's metrics", state.name)

    def _check_open_requests(self) -> None:
        now = self.clock()
        for state in list(self.open.values()):
            if now - state.last_cancel_check >= self.cancel_check_interval:
                state.last_cancel_check = now
                try:
                    cancelled = state.sink.is_cancelled()
                except Exception:  # noqa: BLE001
                    log.exception("%s: could not check for cancellation", state.name)
                    cancelled = False
                if cancelled:
                    error = CancelledError("The request was cancelled by the client; generation stopped.")
                    self._finish_with_error(state, error, "cancelled")
                    continue
            if self.idle_timeout and now - state.last_activity >= self.idle_timeout:
                error = UnavailableError(
                    f"The generation model sent nothing for {self.idle_timeout:g} s; the request was abandoned."
                )
                self._finish_with_error(state, error, "error")


async def pump(sender: Sender, state: RequestState, index: int, stream: TargetStream, decoder: Decoder) -> None:
    """Coroutine: one choice's stream, decoded and handed to the sender response by response."""
    ended = False  # whether the stream itself ended (else it is abandoned)
    try:
        async for outputs in stream:
            if state.done:
                break
            if state.first_event_at is None:
                state.first_event_at = time.monotonic()
            if outputs:
                sender.output(state, index, decoder.decode(outputs))
            if decoder.finished:
                break
        else:
            ended = True
        if not state.done:
            rest = decoder.end()
            if rest is not None:
                sender.output(state, index, rest)
            sender.end(state, index)
    except OpenAIError as error:
        sender.fail(state, error)
    except Exception as exc:  # noqa: BLE001  (every failure must end the request)
        log.exception("%s: stream %d failed", state.name, index)
        sender.fail(state, InternalError(f"The generation stream failed: {exc}"))
    if not ended:
        stream.abandon()
        await stream.released()
