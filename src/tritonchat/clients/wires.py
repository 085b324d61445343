"""Wires: one request body in, its response payloads (JSON text) out, in order.

A wire carries an OpenAI request body (JSON text) to a Triton model and yields what the model
answers: one payload without streaming, the chunks with streaming. An error from the model
raises the `openai` package's exception (`tritonchat.clients.errors.api_error`); closing the
payload iterator before its end cancels the request on the server.

    wire(protocol, url, headers=None, timeout=600.0, *, asynchronous=False)   a wire by protocol
    WIRES, ASYNC_WIRES          {"http": HttpWire, "grpc": GrpcWire} and the asyncio ones
    HttpWire(url, headers, timeout, *, transport=None)        HTTP generate / generate_stream
    GrpcWire(url, headers, timeout)                           a gRPC stream (the `grpc` extra)
    AsyncHttpWire, AsyncGrpcWire                              the same for asyncio
    Wire, AsyncWire             their interface: payloads(model, body, stream), close()
    http_base(url)              "host:port" or a URL -> the base URL of Triton's HTTP endpoint
    httpx                       the HTTP library the HTTP wires use (httpx2 from openai 3.x)

`generate_stream`'s server-sent events are read with `tritonchat.sse`. `transport` (an
`httpx.BaseTransport` / `AsyncBaseTransport`) replaces the network, for tests.

Cancelling a gRPC stream can crash Triton 2.51 under load (see docs/design.md, "Disconnects");
use HTTP (the default) there.
"""

from __future__ import annotations

import json
import queue
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

import numpy as np

from ..sse import aevents, events
from .errors import api_error, httpx


class Wire(Protocol):
    def payloads(self, model: str, body: str, stream: bool) -> Iterator[str]: ...

    def close(self) -> None: ...


class AsyncWire(Protocol):
    def payloads(self, model: str, body: str, stream: bool) -> AsyncIterator[str]: ...

    async def close(self) -> None: ...


def http_base(url: str) -> str:
    """The base URL of Triton's HTTP endpoint: `host:port` gets `http://`, a URL stays as it is."""
    return url.rstrip("/") if "://" in url else f"http://{url}"


def _endpoint(base: str, model: str, stream: bool) -> str:
    return f"{base}/v2/models/{model}/" + ("generate_stream" if stream else "generate")


def _json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


def _error_message(content: bytes) -> str:
    """The error message of an error answer: `{"error": "..."}`, or that as an event (`data: {...}`,
    as Triton 2.51's `generate_stream` answers an error that comes before any response, with the
    error's status); anything else is taken as it is."""
    data = _json(content)
    if data is None and content.lstrip().startswith(b"data:"):
        data = next(events(content.splitlines()), None)
    if isinstance(data, dict) and "error" in data:
        return data["error"]
    return content.decode("utf-8", errors="replace")


def _answer(content: bytes, url: str) -> str:
    """The payload of a `generate` answer (`{"response": ...}`); an error answer raises."""
    data = _json(content)
    if isinstance(data, dict) and "response" in data and "error" not in data:
        return data["response"]
    raise api_error(_error_message(content), url)


def _refused(response) -> bool:
    """`generate_stream` refused the request: an error answer instead of an event stream."""
    content_type = response.headers.get("content-type", "")
    return response.status_code != 200 or content_type.startswith("application/json")


def _payload(event: Any, url: str) -> str | None:
    """The payload of one `generate_stream` event (`{"response": ...}`); an error event raises."""
    if isinstance(event, dict):
        if "error" in event:
            raise api_error(event["error"], url)
        return event.get("response")
    return None


def _request_tensor(grpcclient, body: str):
    tensor = grpcclient.InferInput("request", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([body.encode("utf-8")], dtype=np.object_))
    return tensor


def _grpc_payload(result) -> str:
    return result.as_numpy("response").reshape(-1)[0].decode("utf-8")


class HttpWire:
    """Triton's HTTP `generate` (one payload) and `generate_stream` (server-sent events)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout: float = 600.0, *,
                 transport: httpx.BaseTransport | None = None):
        self.base = http_base(url)
        self.client = httpx.Client(headers=headers, timeout=timeout, transport=transport)

    def payloads(self, model: str, body: str, stream: bool) -> Iterator[str]:
        url = _endpoint(self.base, model, stream)
        with self.client.stream("POST", url, json={"request": body}) as response:
            if not stream:
                yield _answer(response.read(), url)
                return
            if _refused(response):
                raise api_error(_error_message(response.read()), url)
            for event in events(response.iter_lines()):
                payload = _payload(event, url)
                if payload is not None:
                    yield payload

    def close(self) -> None:
        self.client.close()


class AsyncHttpWire:
    """`HttpWire` for asyncio."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout: float = 600.0, *,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.base = http_base(url)
        self.client = httpx.AsyncClient(headers=headers, timeout=timeout, transport=transport)

    async def payloads(self, model: str, body: str, stream: bool) -> AsyncIterator[str]:
        url = _endpoint(self.base, model, stream)
        async with self.client.stream("POST", url, json={"request": body}) as response:
            if not stream:
                yield _answer(await response.aread(), url)
                return
            if _refused(response):
                raise api_error(_error_message(await response.aread()), url)
            async for event in aevents(response.aiter_lines()):
                payload = _payload(event, url)
                if payload is not None:
                    yield payload

    async def close(self) -> None:
        await self.client.aclose()


class GrpcWire:
    """A gRPC stream per request (tritonclient, the `grpc` extra)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout: float = 600.0):
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
            client.async_stream_infer(model, [_request_tensor(grpcclient, body)], enable_empty_final_response=True)
            while True:
                result, error = results.get(timeout=self.timeout)
                if error is not None:
                    finished = True
                    raise api_error(error.message(), f"grpc://{self.url}/{model}")
                response = result.get_response()
                final = response.parameters["triton_final_response"].bool_param
                finished = final
                if response.outputs:
                    yield _grpc_payload(result)
                if final:
                    return
        finally:
            client.stop_stream(cancel_requests=not finished)
            client.close()

    def close(self) -> None:
        pass


class AsyncGrpcWire:
    """`GrpcWire` for asyncio (one channel, made on first use inside the caller's event loop)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout: float = 600.0):
        import tritonclient.grpc as grpcclient  # noqa: PLC0415
        import tritonclient.grpc.aio as grpcaio  # noqa: PLC0415

        self.grpcclient = grpcclient
        self.grpcaio = grpcaio
        self._client = None
        self.url = url
        self.headers = headers
        self.timeout = timeout

    async def payloads(self, model: str, body: str, stream: bool) -> AsyncIterator[str]:
        tensor = _request_tensor(self.grpcclient, body)

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
                    yield _grpc_payload(result)
                if finished:
                    return
        finally:
            if not finished:
                responses.cancel()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


WIRES: dict[str, type] = {"http": HttpWire, "grpc": GrpcWire}
ASYNC_WIRES: dict[str, type] = {"http": AsyncHttpWire, "grpc": AsyncGrpcWire}


def wire(protocol: str, url: str, headers: dict[str, str] | None = None, timeout: float = 600.0, *,
         asynchronous: bool = False):
    """A wire to Triton at `url` (its HTTP address for "http", its gRPC address for "grpc");
    `headers` go with every request. Raises ValueError for an unknown protocol, ImportError for
    "grpc" without the `grpc` extra."""
    table = ASYNC_WIRES if asynchronous else WIRES
    if protocol not in table:
        raise ValueError(f"protocol must be one of {sorted(table)}")
    return table[protocol](url, headers, timeout)


__all__ = ["ASYNC_WIRES", "WIRES", "AsyncGrpcWire", "AsyncHttpWire", "AsyncWire", "GrpcWire", "HttpWire", "Wire",
           "http_base", "httpx", "wire"]
