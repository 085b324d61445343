"""How `openai_chat` reads its generation model: one interface for every transport, a registry of
the transports by name, and one mapping of the generation model's errors (`error_for`). The
reading loop that hands a stream's outputs to the sender is `sender.pump`.

A transport opens one `TargetStream` per choice. The stream yields each response's output
tensors by name; `abandon` gives it up (cancelled where that is safe, else read to its end
and discarded), and `released` waits until it holds nothing any more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import numpy as np

from ..errors import BadRequestError, CancelledError, InternalError, NotFoundError, OpenAIError, UnavailableError
from ..formats import TargetCall

Outputs = dict[str, np.ndarray]


class TargetStream(Protocol):
    def __aiter__(self) -> AsyncIterator[Outputs]: ...

    def abandon(self) -> None:
        """On the event loop: the responses are no longer wanted."""

    async def released(self) -> None:
        """After `abandon`: returns once the stream is closed (drained or cancelled)."""

    def cancel_hook(self) -> Callable[[], None]:
        """`abandon` for the sender thread (the client went away, another choice failed)."""


class Transport(Protocol):
    async def open(self, call: TargetCall) -> TargetStream: ...

    async def close(self) -> None: ...


# name -> factory(settings) of a Transport; `transport` settings choose one by name.
TRANSPORTS: dict[str, Callable[[Any], Transport]] = {}


def register_transport(name: str):
    """Class or function decorator: `factory(settings)` makes the transport called `name`."""
    def register(factory):
        TRANSPORTS[name] = factory
        return factory
    return register


def make_transport(settings) -> Transport:
    """The transport `settings.transport` names (its module must have been imported)."""
    try:
        factory = TRANSPORTS[settings.transport]
    except KeyError:
        raise ValueError(f"unknown transport {settings.transport!r}; known: {', '.join(sorted(TRANSPORTS))}") from None
    return factory(settings)


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
