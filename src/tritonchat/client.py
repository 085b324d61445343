"""A Python client for `openai_chat` and `openai_completions`, shaped like the `openai` SDK.

    from tritonchat.client import TritonChat
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
gRPC protocol also the `grpc` extra.

Cancelling a gRPC stream can crash Triton 2.51 under load (see docs/design.md, "Disconnects");
use the HTTP protocol (the default) there.
"""

from __future__ import annotations

import itertools
import json
import queue
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np

try:
    import httpx2 as httpx  # the HTTP library of the `openai` package from 3.x
except ImportError:  # pragma: no cover  (older openai releases use httpx)
    import httpx

import openai
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

CHAT_MODEL = "openai_chat"
COMPLETIONS_MODEL = "openai_completions"

_EXCEPTIONS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def error_status(error: dict) -> int:
    """The HTTP status of an OpenAI error object as `openai_chat` sends it."""
    kind, code = error.get("type"), error.get("code")
    if code == "model_not_found":
        return 404
    if code == "service_unavailable":
        return 503
    if kind == "cancelled":
        return 499
    if kind == "invalid_request_error":
        return 400
    return 500


def error_body(message: str) -> dict:
    """The OpenAI error object inside a Triton error message (a plain message is wrapped)."""
    try:
        value = json.loads(message)
    except (TypeError, ValueError):
        value = None
    if isinstance(value, dict) and isinstance(value.get("error"), dict):
        return value
    return {"error": {"message": str(message), "type": "server_error", "param": None, "code": None}}


def api_error(message: str, url: str) -> openai.APIStatusError:
    """The `openai` exception for a Triton error message holding an OpenAI error object."""
    body = error_body(message)
    status = error_status(body["error"])
    response = httpx.Response(status, json=body, request=httpx.Request("POST", url))
    exception = _EXCEPTIONS.get(status, openai.InternalServerError if status >= 500 else openai.APIStatusError)
    return exception(body["error"].get("message") or message, response=response, body=body["error"])


def _http_base(url: str) -> str:
    return url.rstrip("/") if "://" in url else f"http://{url}"


def _parse(payload: str, kind: type) -> Any:
    # As the `openai` SDK does: built without validation (a streamed Completion's
    # `finish_reason` is null until its last chunk, which its type does not allow).
    return kind.construct(**json.loads(payload))


# ------------------------------------------------------------------------------------------
# Wires: one request body in, its response payloads (JSON text) out, in order.
# ------------------------------------------------------------------------------------------


class _HttpWire:
    def __init__(self, url: str, headers: dict[str, str] | None, timeout: float):
        self.base = _http_base(url)
        self.client = httpx.Client(headers=headers, timeout=timeout)

    def payloads(self, model: str, body: str, stream: bool) -> Iterator[str]:
        url = f"{self.base}/v2/models/{model}/" + ("generate_stream" if stream else "generate")
        with self.client.stream("POST", url, json={"request": body}) as response:
            if not stream:
                data = json.loads(response.read())
                if "error" in data:
                    raise api_error(data["error"], url)
                yield data["response"]
                return
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    if line.strip().startswith("{"):  # an error before the stream began
                        data = json.loads(line)
                        raise api_error(data.get("error", line), url)
                    continue
                data = json.loads(line[len("data: "):])
                if "error" in data:
                    raise api_error(data["error"], url)
                if "response" in data:
                    yield data["response"]

    def close(self) -> None:
        self.client.close()


class _GrpcWire:
    def __init__(self, url: str, headers: dict[str, str] | None, timeout: float):
        import tritonclient.grpc as grpcclient  # noqa: PLC0415  (the `grpc` extra)

        self.grpcclient = grpcclient
        self.url = url
        self.headers = headers
        self.timeout = timeout

    def payloads(self, model: str, body: str, stream: bool) -> Iterator[str]:
        grpcclient = self.grpcclient
        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(self.url)
        finished = False
        try:
            client.start_stream(callback=lambda result, error: results.put((result, error)), headers=self.headers)
            tensor = grpcclient.InferInput("request", [1], "BYTES")
            tensor.set_data_from_numpy(np.array([body.encode("utf-8")], dtype=np.object_))
            client.async_stream_infer(model, [tensor], enable_empty_final_response=True)
            while True:
                result, error = results.get(timeout=self.timeout)
                if error is not None:
                    finished = True
                    raise api_error(error.message(), f"grpc://{self.url}/{model}")
                response = result.get_response()
                final = response.parameters["triton_final_response"].bool_param
                finished = final
                if response.outputs:
                    yield result.as_numpy("response").reshape(-1)[0].decode("utf-8")
                if final:
                    return
        finally:
            client.stop_stream(cancel_requests=not finished)
            client.close()

    def close(self) -> None:
        pass


class _AsyncHttpWire:
    def __init__(self, url: str, headers: dict[str, str] | None, timeout: float):
        self.base = _http_base(url)
        self.client = httpx.AsyncClient(headers=headers, timeout=timeout)

    async def payloads(self, model: str, body: str, stream: bool) -> AsyncIterator[str]:
        url = f"{self.base}/v2/models/{model}/" + ("generate_stream" if stream else "generate")
        async with self.client.stream("POST", url, json={"request": body}) as response:
            if not stream:
                data = json.loads(await response.aread())
                if "error" in data:
                    raise api_error(data["error"], url)
                yield data["response"]
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    if line.strip().startswith("{"):
                        data = json.loads(line)
                        raise api_error(data.get("error", line), url)
                    continue
                data = json.loads(line[len("data: "):])
                if "error" in data:
                    raise api_error(data["error"], url)
                if "response" in data:
                    yield data["response"]

    async def close(self) -> None:
        await self.client.aclose()


class _AsyncGrpcWire:
    def __init__(self, url: str, headers: dict[str, str] | None, timeout: float):
        import tritonclient.grpc as grpcclient  # noqa: PLC0415
        import tritonclient.grpc.aio as grpcaio  # noqa: PLC0415

        self.grpcclient = grpcclient
        self.grpcaio = grpcaio
        self._client = None  # made on first use, inside the caller's event loop
        self.url = url
        self.headers = headers
        self.timeout = timeout

    async def payloads(self, model: str, body: str, stream: bool) -> AsyncIterator[str]:
        tensor = self.grpcclient.InferInput("request", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([body.encode("utf-8")], dtype=np.object_))

        async def requests():
            yield {"model_name": model, "inputs": [tensor], "enable_empty_final_response": True}

        if self._client is None:
            self._client = self.grpcaio.InferenceServerClient(self.url)
        responses = self._client.stream_infer(requests(), headers=self.headers)
        finished = False
        try:
            async for result, error in responses:
                if error is not None:
                    finished = True
                    raise api_error(error.message(), f"grpc://{self.url}/{model}")
                response = result.get_response()
                finished = response.parameters["triton_final_response"].bool_param
                if response.outputs:
                    yield result.as_numpy("response").reshape(-1)[0].decode("utf-8")
                if finished:
                    return
        finally:
            if not finished:
                responses.cancel()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


_WIRES = {"http": _HttpWire, "grpc": _GrpcWire}
_ASYNC_WIRES = {"http": _AsyncHttpWire, "grpc": _AsyncGrpcWire}


def _body(params: dict[str, Any], stream: bool) -> str:
    extra = params.pop("extra_body", None) or {}
    body = {key: value for key, value in params.items() if value is not None}
    body.update(extra)
    if stream:
        body["stream"] = True
    else:
        body.pop("stream", None)
    return json.dumps(body, ensure_ascii=False)


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


class _Namespace:
    pass


class TritonChat:
    """Sync client. `url`: the server's HTTP (`protocol="http"`) or gRPC address;
    `chat_model` / `completions_model`: the Triton model names to call; `headers`: sent with
    every request (e.g. a restricted protocol's key)."""

    def __init__(self, url: str = "localhost:8000", *, protocol: str = "http", chat_model: str = CHAT_MODEL,
                 completions_model: str = COMPLETIONS_MODEL, headers: dict[str, str] | None = None,
                 timeout: float = 600.0):
        if protocol not in _WIRES:
            raise ValueError(f"protocol must be one of {sorted(_WIRES)}")
        self._wire = _WIRES[protocol](url, headers, timeout)
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
        if protocol not in _ASYNC_WIRES:
            raise ValueError(f"protocol must be one of {sorted(_ASYNC_WIRES)}")
        self._wire = _ASYNC_WIRES[protocol](url, headers, timeout)
        self.chat = _Namespace()
        self.chat.completions = _AsyncEndpoint(self._wire, chat_model, ChatCompletion, ChatCompletionChunk)
        self.completions = _AsyncEndpoint(self._wire, completions_model, Completion, Completion)

    async def close(self) -> None:
        await self._wire.close()

    async def __aenter__(self) -> AsyncTritonChat:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


__all__ = ["AsyncStream", "AsyncTritonChat", "Stream", "TritonChat", "api_error", "error_status"]

