"""Moves generation outputs to the client, off the event loop.

Per request, one reader thread per choice pulls outputs from that choice's generation
stream (a blocking iterator) and one writer thread turns them into OpenAI payloads and
sends them (a blocking call). When the writer falls behind, outputs that are already
waiting are merged into one chunk, so a slow client path costs fewer sends instead of
growing latency. The writer also watches for the client going away and for a generation
model that stops answering, and guarantees that exactly one final response is sent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Callable, Protocol

from .backends import GenerationOutput
from .errors import CancelledError, InternalError, OpenAIError, UnavailableError
from .stream import ChatResponseBuilder

log = logging.getLogger(__name__)

_END = object()


class Sink(Protocol):
    """Where a request's responses go (Triton's response sender)."""

    def send(self, payload: str, final: bool) -> None: ...

    def send_error(self, error: OpenAIError) -> None: ...

    def is_cancelled(self) -> bool: ...


class Generation(Protocol):
    """One choice's stream of outputs from the generation model."""

    def __iter__(self) -> Iterator[GenerationOutput]: ...

    def cancel(self) -> None: ...


class ResponsePump:
    def __init__(
        self,
        builder: ChatResponseBuilder,
        generations: list[Generation],
        sink: Sink,
        *,
        stream: bool,
        name: str = "",
        cancel_check_interval: float = 0.1,
        idle_timeout: float = 0.0,
        require_finish_reason: bool = False,
        clock: Callable[[], float] = time.monotonic,
        on_done: Callable[[], None] | None = None,
    ):
        self.builder = builder
        self.generations = generations
        self.sink = sink
        self.stream = stream
        self.name = name or builder.completion_id
        self.cancel_check_interval = cancel_check_interval
        self.idle_timeout = idle_timeout
        self.require_finish_reason = require_finish_reason
        self.clock = clock
        self.on_done = on_done
        self._cond = threading.Condition()
        self._events: deque = deque()
        self._stopped = False
        self.outcome: str | None = None  # "completed", "cancelled", "error"

    # ---- threads -------------------------------------------------------------------------
    def start(self) -> None:
        for index, generation in enumerate(self.generations):
            threading.Thread(target=self._read, args=(index, generation), daemon=True, name=f"chat-read-{index}").start()
        threading.Thread(target=self.run_writer, daemon=True, name="chat-write").start()

    def _put(self, item) -> None:
        with self._cond:
            if self._stopped:
                return
            self._events.append(item)
            self._cond.notify()

    def _read(self, index: int, generation: Generation) -> None:
        try:
            for output in generation:
                self._put((index, output))
        except BaseException as exc:  # noqa: BLE001  (every failure must reach the writer)
            self._put((index, exc))
        else:
            self._put((index, _END))

    def run_writer(self) -> None:
        try:
            self.outcome = self._write()
        except Exception as exc:  # noqa: BLE001
            log.exception("failed while sending responses")
            self._stop_generations()
            self.outcome = "error"
            self._send_error(InternalError(f"Internal error while streaming the response: {exc}"))
        finally:
            if self.on_done:
                self.on_done()

    # ---- the writer --------------------------------------------------------------------
    def _write(self) -> str:
        pending = len(self.generations)
        now = self.clock()
        last_check = last_activity = now
        while pending:
            with self._cond:
                if not self._events:
                    self._cond.wait(self._wait_time(now, last_activity))
                batch = list(self._events)
                self._events.clear()
            now = self.clock()
            if now - last_check >= self.cancel_check_interval:
                last_check = now
                if self.sink.is_cancelled():
                    log.info("%s: cancelled by the client; generation stopped", self.name)
                    self._stop_generations()
                    self._send_error(CancelledError("The request was cancelled by the client."))
                    return "cancelled"
            if not batch:
                if self.idle_timeout and now - last_activity >= self.idle_timeout:
                    log.warning("%s: no output for %g s; abandoned", self.name, self.idle_timeout)
                    self._stop_generations()
                    self._send_error(
                        UnavailableError(
                            f"The generation model sent nothing for {self.idle_timeout:g} s; the request was abandoned."
                        )
                    )
                    return "error"
                continue
            last_activity = now
            merged, ended, error = _coalesce(batch)
            payloads: list[str] = []
            for index, output in merged.items():
                if self.stream:
                    payloads += self.builder.stream_output(index, output)
                else:
                    self.builder.add_output(index, output)
            if error is not None:
                # What arrived before the error still reaches a streaming client.
                for payload in payloads:
                    self.sink.send(payload, final=False)
                log.info("%s: ended with an error: %s", self.name, error.message)
                self._stop_generations()
                self._send_error(error)
                return "error"
            for index in ended:
                if self.require_finish_reason and self.builder.choices[index].finish_reason is None:
                    # The generation model reports why it stopped on its last response; a
                    # stream that ends without one lost that response (and with it, an error).
                    self._stop_generations()
                    self._send_error(InternalError("The generation model ended the stream without finishing it."))
                    return "error"
                pending -= 1
                if self.stream:
                    payloads += self.builder.stream_finish(index)
            if pending == 0:
                payloads += self.builder.stream_usage() if self.stream else [self.builder.completion()]
            last = len(payloads) - 1
            for i, payload in enumerate(payloads):
                self.sink.send(payload, final=(pending == 0 and i == last))
        return "completed"

    def _wait_time(self, now: float, last_activity: float) -> float:
        wait = self.cancel_check_interval
        if self.idle_timeout:
            wait = min(wait, max(0.0, last_activity + self.idle_timeout - now))
        return max(wait, 0.001)

    def _stop_generations(self) -> None:
        with self._cond:
            self._stopped = True
            self._events.clear()
        for generation in self.generations:
            try:
                generation.cancel()
            except Exception:  # noqa: BLE001
                log.exception("cancelling a generation failed")

    def _send_error(self, error: OpenAIError) -> None:
        try:
            self.sink.send_error(error)
        except Exception:  # noqa: BLE001
            log.exception("could not send the error response")


def _coalesce(batch: list) -> tuple[dict[int, GenerationOutput], list[int], OpenAIError | None]:
    """Merge each choice's waiting outputs into one; note which choices ended and the first error."""
    merged: dict[int, GenerationOutput] = {}
    ended: list[int] = []
    for index, item in batch:
        if item is _END:
            ended.append(index)
        elif isinstance(item, BaseException):
            if isinstance(item, OpenAIError):
                return merged, ended, item
            log.error("generation stream %d failed: %r", index, item)
            return merged, ended, InternalError(f"The generation stream failed: {item}")
        elif index in merged:
            merged[index] = merged[index].merge(item)
        else:
            merged[index] = item
    return merged, ended, None
