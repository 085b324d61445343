"""How `openai_chat` reads its generation model: one interface for every transport, one
reading loop (`pump`) and one mapping of the generation model's errors (`error_for`).

A transport opens one `TargetStream` per choice. The stream yields each response's output
tensors by name; `abandon` gives it up (cancelled where that is safe, else read to its end
and discarded), and `released` waits until it holds nothing any more.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import numpy as np

from ..errors import BadRequestError, CancelledError, InternalError, NotFoundError, OpenAIError, UnavailableError
from ..formats import Decoder
from ..responder import RequestState, Responder
from ..service import TargetCall

log = logging.getLogger(__name__)

Outputs = dict[str, np.ndarray]


class TargetStream(Protocol):
    def __aiter__(self) -> AsyncIterator[Outputs]: ...

    def abandon(self) -> None:
        """On the event loop: the responses are no longer wanted."""

    async def released(self) -> None:
        """After `abandon`: returns once the stream is closed (drained or cancelled)."""

    def cancel_hook(self) -> Callable[[], None]:
        """`abandon` for the responder thread (the client went away, another choice failed)."""


class Transport(Protocol):
    async def open(self, call: TargetCall) -> TargetStream: ...

    async def close(self) -> None: ...


async def pump(responder: Responder, state: RequestState, index: int, stream: TargetStream, decoder: Decoder) -> None:
    """Coroutine: one choice's stream, decoded and handed to the responder response by response."""
    ended = False  # whether the stream itself ended (else it is abandoned)
    try:
        async for outputs in stream:
            if state.done:
                break
            if outputs:
                responder.output(state, index, decoder.decode(outputs))
            if decoder.finished:
                break
        else:
            ended = True
        if not state.done:
            rest = decoder.end()
            if rest is not None:
                responder.output(state, index, rest)
            responder.end(state, index)
    except OpenAIError as error:
        responder.fail(state, error)
    except Exception as exc:  # noqa: BLE001  (every failure must end the request)
        log.exception("%s: stream %d failed", state.name, index)
        responder.fail(state, InternalError(f"The generation stream failed: {exc}"))
    if not ended:
        stream.abandon()
        await stream.released()


def error_for(code: str | None, message: str) -> OpenAIError:
    """An error of the generation model (a Triton status name, or None when only the text is
    known) as the error our client sees."""
    if code == "CANCELLED":
        return CancelledError(f"The generation was cancelled: {message}")
    lowered = message.lower()
    if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED") or "is not ready" in lowered or "unknown model" in lowered:
        return UnavailableError(f"The generation model is unavailable: {message}")
    text = f"The generation model failed: {message}"
    if not message.strip() or message.rstrip().endswith(":"):
        # e.g. vLLM's EngineGenerateError, which has no message of its own.
        text = f"{text.rstrip()} (no reason given; the server log has the generation model's traceback)"
    if code == "NOT_FOUND":
        return NotFoundError(text, param=None, code=None)
    if code in ("INVALID_ARGUMENT", "INVALID_ARG"):
        return BadRequestError(text)
    return InternalError(text)
