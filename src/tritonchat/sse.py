"""Server-sent events as Triton's `generate_stream` and the gateway write them: each event is a
`data:` line (JSON, or `[DONE]` from the gateway) followed by a blank line. One reader for every
side that reads them: the HTTP transport, the clients, the tests and the tools.

    data_of(line)          the payload of one line, or None when it is not a `data:` line
    EventReader().feed(b)  the payloads of the events completed by a piece of a byte stream
    events(lines)          the JSON value of every `data:` line of an iterable of lines
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, overload

DONE = "[DONE]"


@overload
def data_of(line: bytes) -> bytes | None: ...


@overload
def data_of(line: str) -> str | None: ...


def data_of(line):
    """The payload of a `data:` line (its optional leading space and line end removed), else None."""
    if isinstance(line, bytes):
        if not line.startswith(b"data:"):
            return None
        value = line[5:].rstrip(b"\r\n")
        return value[1:] if value.startswith(b" ") else value
    if not line.startswith("data:"):
        return None
    value = line[5:].rstrip("\r\n")
    return value[1:] if value.startswith(" ") else value


class EventReader:
    """Splits a byte stream read in arbitrary pieces into events; `feed` returns the `data`
    payloads of the events a piece completed (events are separated by a blank line)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        if b"\n\n" not in buffer:
            self._buffer = buffer
            return []
        *complete, self._buffer = buffer.split(b"\n\n")
        found = []
        for event in complete:
            if event.startswith(b"data: ") and b"\n" not in event:  # the usual one-line event
                found.append(event[6:])
                continue
            for line in event.split(b"\n"):
                value = data_of(line)
                if value is not None:
                    found.append(value)
        return found


def events(lines: Iterable[bytes | str]) -> Iterator[Any]:
    """The JSON value of each `data:` line (the gateway's closing `[DONE]` is skipped)."""
    for line in lines:
        value = data_of(line)
        if value is not None and value not in (DONE, DONE.encode()):
            yield json.loads(value)


async def aevents(lines: AsyncIterable[bytes | str]) -> AsyncIterator[Any]:
    """`events` for an asynchronous iterable of lines."""
    async for line in lines:
        value = data_of(line)
        if value is not None and value not in (DONE, DONE.encode()):
            yield json.loads(value)
