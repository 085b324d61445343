"""A Python client for `openai_chat` and `openai_completions`, shaped like the `openai` SDK.

    from tritonchat.clients import TritonChat
    client = TritonChat("localhost:8000")                       # HTTP generate / generate_stream
    client = TritonChat("localhost:8001", protocol="grpc")      # gRPC streaming (tritonclient)
    completion = client.chat.completions.create(model="default", messages=[...])
    for chunk in client.chat.completions.create(model="default", messages=[...], stream=True):
        print(chunk.choices[0].delta.content or "", end="")

`create` returns the `openai` package's `ChatCompletion` / `Completion`, or with `stream=True`
an iterator of `ChatCompletionChunk` / `Completion`; closing it (or leaving its `with` block,
or breaking out of a `for` over it) cancels the request on the server. Errors raise the
`openai` package's exceptions (`BadRequestError`, `NotFoundError`, `InternalServerError`, ...)
with the OpenAI error body; the HTTP status comes from the error itself, so it is right
even on Triton releases whose generate endpoints answer 400 for every error.
`AsyncTritonChat` is the same with `await` and `async for`.

The request body goes to the model as it is (fields the SDK does not know are passed on);
only `stream` is set from the `stream` argument. Needs the `client` extra (`openai`); the
gRPC protocol also the `grpc` extra. The requests travel on a wire (`tritonchat.clients.wires`).

Cancelling a gRPC stream can crash Triton 2.51 under load (see docs/design.md, "Disconnects");
use the HTTP protocol (the default) there.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from . import CHAT_MODEL, COMPLETIONS_MODEL
from .wires import wire


def _parse(payload: str, kind: type) -> Any:
    # As the `openai` SDK does: built without validation (a streamed Completion's
    # `finish_reason` is null until its last chunk, which its type does not allow).
    return kind.construct(**json.loads(payload))


def _body(params: dict[str, Any], stream: bool) -> str:
    extra = params.pop("extra_body", None) or {}
    body = {key: value for key, value in params.items() if value is not None}
    body.update(extra)
    if stream:
        body["stream"] = True
    else:
        body.pop("stream", None)
    return json.dumps(body, ensure_ascii=False)


class _Namespace:
    pass


# ------------------------------------------------------------------------------------------
# Sync
# ------------------------------------------------------------------------------------------


class Stream:
    """The chunks of one streamed request; closing it cancels the request. `create` has read
    the first response already, so a refused request raises there, as with the `openai` SDK."""

    def __init__(self, payloads: Iterator[str], kind: type, first: list[str]):
        self._payloads = payloads
        self._kind = kind
        self._first = first

    def __iter__(self):
        while self._first:
            yield _parse(self._first.pop(), self._kind)
        for payload in self._payloads:
            yield _parse(payload, self._kind)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._payloads.close()  # a generator: runs its cleanup, which cancels an open request


class _Endpoint:
    def __init__(self, wire, model: str, whole: type, chunk: type):
        self._wire, self._model, self._whole, self._chunk = wire, model, whole, chunk

    def create(self, *, stream: bool = False, **params: Any):
        payloads = self._wire.payloads(self._model, _body(params, stream), stream)
        if stream:
            return Stream(payloads, self._chunk, list(itertools.islice(payloads, 1)))
        try:
            return _parse(next(payloads), self._whole)
        finally:
            payloads.close()


class TritonChat:
    """Sync client. `url`: the server's HTTP (`protocol="http"`) or gRPC address;
    `chat_model` / `completions_model`: the Triton model names to call; `headers`: sent with
    every request (e.g. a restricted protocol's key)."""

    def __init__(self, url: str = "localhost:8000", *, protocol: str = "http", chat_model: str = CHAT_MODEL,
                 completions_model: str = COMPLETIONS_MODEL, headers: dict[str, str] | None = None,
                 timeout: float = 600.0):
        self._wire = wire(protocol, url, headers, timeout)
        self.chat = _Namespace()
        self.chat.completions = _Endpoint(self._wire, chat_model, ChatCompletion, ChatCompletionChunk)
        self.completions = _Endpoint(self._wire, completions_model, Completion, Completion)

    def close(self) -> None:
        self._wire.close()

    def __enter__(self) -> TritonChat:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------------------------------
# Async
# ------------------------------------------------------------------------------------------


class AsyncStream:
    """The chunks of one streamed request; `aclose()` cancels the request (the first response
    was read by `create`, as in `Stream`)."""

    def __init__(self, payloads, kind: type, first: list[str]):
        self._payloads = payloads
        self._kind = kind
        self._first = first

    async def __aiter__(self):
        while self._first:
            yield _parse(self._first.pop(), self._kind)
        async for payload in self._payloads:
            yield _parse(payload, self._kind)

    async def __aenter__(self) -> AsyncStream:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._payloads.aclose()


class _AsyncEndpoint:
    def __init__(self, wire, model: str, whole: type, chunk: type):
        self._wire, self._model, self._whole, self._chunk = wire, model, whole, chunk

    async def create(self, *, stream: bool = False, **params: Any):
        payloads = self._wire.payloads(self._model, _body(params, stream), stream)
        if stream:
            try:
                first = [await payloads.__anext__()]
            except StopAsyncIteration:
                first = []
            return AsyncStream(payloads, self._chunk, first)
        try:
            return _parse(await payloads.__anext__(), self._whole)
        finally:
            await payloads.aclose()


class AsyncTritonChat:
    """The asyncio client; the same arguments as `TritonChat`."""

    def __init__(self, url: str = "localhost:8000", *, protocol: str = "http", chat_model: str = CHAT_MODEL,
                 completions_model: str = COMPLETIONS_MODEL, headers: dict[str, str] | None = None,
                 timeout: float = 600.0):
        self._wire = wire(protocol, url, headers, timeout, asynchronous=True)
        self.chat = _Namespace()
        self.chat.completions = _AsyncEndpoint(self._wire, chat_model, ChatCompletion, ChatCompletionChunk)
        self.completions = _AsyncEndpoint(self._wire, completions_model, Completion, Completion)

    async def close(self) -> None:
        await self._wire.close()

    async def __aenter__(self) -> AsyncTritonChat:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


__all__ = ["AsyncStream", "AsyncTritonChat", "Stream", "TritonChat"]
