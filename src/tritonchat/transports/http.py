"""Streaming calls to the generation model through the server's own HTTP `generate_stream`.

`transport: http`: one `generate_stream` request per choice to the Triton server `openai_chat`
runs in (`http_url`), read from the event loop. Inputs travel as the generate extension's JSON
(a scalar for one element, else a flat array the server shapes by the model's dims); outputs
come back as JSON per server-sent event. Closing the connection cancels the request in Triton
(its HTTP frontend calls `TRITONSERVER_InferenceRequestCancel`), which, unlike cancelling a
gRPC stream, survives any number of disconnects (see docs/design.md, "Disconnects"); so a generation
no longer wanted is always stopped. Receiving costs less CPU per response than gRPC here.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable

import numpy as np

from ..errors import UnavailableError
from ..formats import TargetCall
from ..sse import EventReader, events
from .base import Outputs, error_for, register_transport

log = logging.getLogger(__name__)

# Triton's HTTP status for an error -> its error code (2.51 answers 400 for every model error).
_STATUS_CODES = {404: "NOT_FOUND", 499: "CANCELLED", 500: "INTERNAL", 501: "UNSUPPORTED", 503: "UNAVAILABLE"}


def json_value(value: np.ndarray):
    """An input tensor as the generate extension takes it: one element as a scalar, else a flat list."""
    items = value.reshape(-1).tolist()
    items = [item.decode("utf-8") if isinstance(item, bytes) else item for item in items]
    return items[0] if len(items) == 1 else items


def output_array(value) -> np.ndarray:
    """A JSON output value as the request formats read tensors (at least one dimension)."""
    if isinstance(value, str):
        array = np.empty(1, dtype=np.object_)
        array[0] = value
        return array
    return np.atleast_1d(np.asarray(value))


def event_outputs(event: dict, names: list[str]) -> Outputs:
    """The outputs `names` of one `generate_stream` event; an error event raises it."""
    if "error" in event:
        raise error_for(None, str(event["error"]))
    return {name: output_array(event[name]) for name in names if name in event}


class HttpTransport:
    """One aiohttp session per model instance, created lazily on the event loop."""

    def __init__(self, url: str, model: str, version: int = -1, headers: dict[str, str] | None = None,
                 keepalive_s: float = 2.0):
        self.keepalive_s = keepalive_s
        versioned = f"{model}/versions/{version}" if version > 0 else model
        self.endpoint = f"http://{url}/v2/models/{versioned}/generate_stream"
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self._session = None

    def session(self):
        if self._session is None:
            import aiohttp  # noqa: PLC0415  (only with this transport)

            # Idle keep-alive connections close after keepalive_s; a connection given up early
            # is closed at once (that is how the request is cancelled).
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, **(
                    {"keepalive_timeout": self.keepalive_s} if self.keepalive_s else {"force_close": True})),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        return self._session

    async def open(self, call: TargetCall) -> HttpStream:
        body = {name: json_value(value) for name, value in call.inputs.items()}
        if call.request_id:
            body["id"] = call.request_id
        return HttpStream(self, json.dumps(body, ensure_ascii=False).encode("utf-8"), call.outputs)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class HttpStream:
    """One `generate_stream` request; the request is sent when the stream is first read."""

    def __init__(self, transport: HttpTransport, body: bytes, outputs: list[str]):
        self.transport = transport
        self.body = body
        self.outputs = outputs
        self._response = None
        self._task: asyncio.Task | None = None
        self._abandoned = False

    async def __aiter__(self) -> AsyncIterator[Outputs]:
        import aiohttp  # noqa: PLC0415

        if self._abandoned:
            return
        self._task = asyncio.current_task()
        try:
            async with self.transport.session().post(
                self.transport.endpoint, data=self.body, headers=self.transport.headers
            ) as response:
                self._response = response
                if response.status != 200 or response.content_type == "application/json":
                    raise self._error(response.status, await response.text())
                reader = EventReader()
                async for chunk in response.content.iter_any():
                    for payload in reader.feed(chunk):
                        yield event_outputs(json.loads(payload), self.outputs)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            if self._abandoned:
                return
            raise UnavailableError(f"The generation model is unavailable: {exc or type(exc).__name__}") from None

    @staticmethod
    def _error(status: int, text: str):
        """The error of a refused `generate_stream`: `{"error": ...}`, or that as an event (Triton
        2.51 answers an error that comes before any response so, with the error's status)."""
        try:
            value = json.loads(text) if not text.lstrip().startswith("data:") else next(events(text.splitlines()))
            message = value.get("error", text)
        except (ValueError, AttributeError, StopIteration):
            message = text
        return error_for(_STATUS_CODES.get(status), str(message))

    def abandon(self) -> None:
        """Closing the connection cancels the request in Triton (before or during its stream)."""
        if self._abandoned:
            return
        self._abandoned = True
        if self._response is not None:
            self._response.close()
        elif self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()

    async def released(self) -> None:
        return

    def cancel_hook(self) -> Callable[[], None]:
        loop = asyncio.get_running_loop()
        return lambda: loop.call_soon_threadsafe(self.abandon)


@register_transport("http")
def http_transport(settings) -> HttpTransport:
    return HttpTransport(settings.http_url, settings.target_model, settings.target_model_version,
                         settings.loopback_header_map, settings.http_keepalive_s)
