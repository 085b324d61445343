"""Streaming calls to the generation model through the server's own gRPC endpoint.

`transport: grpc`: `openai_chat` opens one `ModelStreamInfer` call per choice on the Triton
server it runs in, from the stub's event loop, with no thread per stream. Errors the generation
model sends mid-stream arrive as stream messages (see `open`).

Giving a call up: cancelling `ModelStreamInfer` calls while the server writes their responses
races in Triton's gRPC frontend and aborts the whole server (seen on 2.51 under a storm of
client disconnects: `GRPC_CALL_ERROR_TOO_MANY_OPERATIONS`, `prior > 0`, SIGSEGV; no later
release is known to be free of it). So a call no longer wanted is drained: read to its end and
discarded (the generation runs to its token budget), and cancelled only once it has stayed
silent for the drain timeout (nothing is being written then), or always with `grpc_cancel: true`.

A drained generation still takes the generation model's time, and nothing can stop it; when
clients drop streams faster than the model finishes them, that work would grow without bound and
starve the streams that are still wanted. So an instance lets at most `max_draining` calls drain
at once: while that many are draining, a new call waits to be opened until one of them ends, and
a call given up while it waits is never opened at all.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from collections.abc import AsyncIterator, Callable

import numpy as np

from ..errors import CancelledError
from ..formats import TargetCall
from .base import Outputs, error_for, register_transport

log = logging.getLogger(__name__)

_DATATYPES = {
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.int32): "INT32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.uint32): "UINT32",
    np.dtype(np.uint64): "UINT64",
    np.dtype(np.float32): "FP32",
    np.dtype(np.float64): "FP64",
}
_NUMPY = {name: dtype for dtype, name in _DATATYPES.items()}


def encode_tensor(value: np.ndarray) -> tuple[str, bytes]:
    """(Triton datatype, raw bytes) of an input tensor; strings are length-prefixed."""
    if value.dtype == np.object_:
        parts = []
        for item in value.reshape(-1):
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
            parts.append(struct.pack("<I", len(data)) + data)
        return "BYTES", b"".join(parts)
    return _DATATYPES[value.dtype], np.ascontiguousarray(value).tobytes()


def decode_tensor(datatype: str, shape: list[int], raw: bytes) -> np.ndarray:
    if datatype == "BYTES":
        items, offset = [], 0
        while offset < len(raw):
            (length,) = struct.unpack_from("<I", raw, offset)
            offset += 4
            items.append(raw[offset : offset + length])
            offset += length
        return np.array(items, dtype=np.object_).reshape(shape)
    return np.frombuffer(raw, dtype=_NUMPY[datatype]).reshape(shape)


def response_outputs(response) -> Outputs:
    """The output tensors of one `ModelInferResponse`, by name."""
    return {
        tensor.name: decode_tensor(tensor.datatype, list(tensor.shape), raw)
        for tensor, raw in zip(response.outputs, response.raw_output_contents)
    }


class GrpcTransport:
    """One gRPC channel per model instance, created lazily on the event loop."""

    def __init__(self, url: str, model: str, version: int = -1, cancel: bool = False, drain_timeout: float = 600.0,
                 headers: dict[str, str] | None = None, max_draining: int = 64):
        self.url = url
        # Triton's restricted gRPC protocols read the key from `triton-grpc-protocol-<key>`.
        self.metadata = tuple((f"triton-grpc-protocol-{name}", value) for name, value in (headers or {}).items())
        self.model = model
        self.version = version
        self.cancel = cancel
        self.drain_timeout = drain_timeout  # 0: never cancel a drained call
        self.max_draining = max_draining  # 0: no limit
        self.draining = 0  # calls given up and still being read to their end
        self._waiting: collections.deque[asyncio.Future] = collections.deque()
        self._stub = None
        self._parse = None
        self._channel = None
        try:  # checked at model load, not at the first request
            import tritonclient.grpc  # noqa: F401, PLC0415
        except ImportError as exc:
            raise RuntimeError(
                "transport: grpc needs tritonclient[grpc], which is not installed here; install "
                "`tritonchat[grpc]`, or use transport: http (the default)") from exc

    def _ensure_stub(self):
        """`ModelStreamInfer` with its responses left as bytes: a stream parses what it reads for
        its choice, and a drained stream parses nothing."""
        if self._stub is None:
            import grpc  # noqa: PLC0415  (only with this transport)
            from tritonclient.grpc import service_pb2  # noqa: PLC0415

            self._channel = grpc.aio.insecure_channel(
                self.url,
                options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
            )
            self._stub = self._channel.stream_stream(
                "/inference.GRPCInferenceService/ModelStreamInfer",
                request_serializer=service_pb2.ModelInferRequest.SerializeToString,
                response_deserializer=None,
            )
            self._parse = service_pb2.ModelStreamInferResponse.FromString
        return self._stub

    def request(self, call: TargetCall):
        from tritonclient.grpc import service_pb2  # noqa: PLC0415

        request = service_pb2.ModelInferRequest(model_name=self.model, id=call.request_id)
        if self.version > 0:
            request.model_version = str(self.version)
        for name, value in call.inputs.items():
            datatype, raw = encode_tensor(value)
            request.inputs.append(
                service_pb2.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=list(value.shape))
            )
            request.raw_input_contents.append(raw)
        for name in call.outputs:
            request.outputs.append(service_pb2.ModelInferRequest.InferRequestedOutputTensor(name=name))
        # Also forward a flag-only FINAL as an empty response, so the end is always seen.
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        return request

    async def open(self, call: TargetCall) -> GrpcStream:
        """The stream of `call`; the call itself starts when the stream is first read."""
        return GrpcStream(self, self.request(call))

    def start(self, request):
        stub = self._ensure_stub()

        async def requests():
            yield request

        # Errors arrive as stream messages; the call stays open until the model's FINAL.
        # (Not `triton_grpc_error: true`: with it, Triton 2.51 closes the call at the first
        # error, and a model that then sends its flag-only FINAL, as tensorrt_llm_bls does,
        # crashes the server with SIGSEGV in TRITONBACKEND_ResponseFactorySendFlags.)
        return stub(requests(), metadata=self.metadata or None)

    def admitted(self) -> asyncio.Future | None:
        """None when a new call may start now; else a future that turns True when it may."""
        if not self.max_draining or self.draining < self.max_draining:
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        return waiter

    def drain_started(self) -> None:
        self.draining += 1

    def drain_ended(self) -> None:
        self.draining -= 1
        if self.draining < self.max_draining:  # every waiting call may start (a soft bound)
            while self._waiting:
                waiter = self._waiting.popleft()
                if not waiter.done():
                    waiter.set_result(True)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


class GrpcStream:
    """One `ModelStreamInfer` call carrying one request, started when first read."""

    def __init__(self, transport: GrpcTransport, request):
        self.transport = transport
        self.request = request
        self.call = None
        self._waiter: asyncio.Future | None = None
        self._abandoned = False
        self._draining = False
        self._last_message = 0.0

    async def __aiter__(self) -> AsyncIterator[Outputs]:
        """The outputs of each response, up to the end of the call (the server ends it right
        after the final response; a call object dropped before its end would be cancelled by
        gRPC when it is collected)."""
        import grpc  # noqa: PLC0415

        try:
            self._waiter = self.transport.admitted()
            if self._waiter is not None and not await self._waiter:
                return  # given up before it started
            if self._abandoned:
                return
            self.call = self.transport.start(self.request)
            parse = self.transport._parse
            async for raw in self.call:
                self._last_message = time.monotonic()
                message = parse(raw)
                if message.error_message:
                    raise error_for(None, message.error_message)
                yield response_outputs(message.infer_response)
        except grpc.aio.AioRpcError as exc:
            raise error_for(exc.code().name, exc.details() or str(exc)) from None
        except asyncio.CancelledError:
            raise CancelledError("The generation was cancelled.") from None
        finally:
            if self.call is not None and self.call.done():
                self._drain_ended()

    def abandon(self) -> None:
        if self._abandoned:
            return
        self._abandoned = True
        if self.call is None:
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(False)
            return
        if self.call.done():
            return
        if self.transport.cancel:
            self.call.cancel()
            return
        self._draining = True
        self.transport.drain_started()
        self._last_message = time.monotonic()
        if self.transport.drain_timeout:
            asyncio.get_running_loop().call_later(self.transport.drain_timeout, self._cancel_if_silent)

    def _cancel_if_silent(self) -> None:
        """Cancels the drained call once it has sent nothing for the drain timeout."""
        if self.call.done():
            return
        silent = time.monotonic() - self._last_message
        if silent < self.transport.drain_timeout:
            asyncio.get_running_loop().call_later(self.transport.drain_timeout - silent, self._cancel_if_silent)
            return
        log.warning("a drained gRPC call stayed silent for %g s; cancelling it", self.transport.drain_timeout)
        self.call.cancel()

    async def released(self) -> None:
        """Reads what is left of the call and discards it (ends when the call ends, also by cancel)."""
        try:
            if self.call is not None:
                async for _message in self.call:
                    self._last_message = time.monotonic()
        except (Exception, asyncio.CancelledError):  # noqa: BLE001  (nothing waits for these responses)
            log.debug("draining a gRPC call ended with an error", exc_info=True)
        finally:
            self._drain_ended()

    def _drain_ended(self) -> None:
        if self._draining:
            self._draining = False
            self.transport.drain_ended()

    def cancel_hook(self) -> Callable[[], None]:
        loop = asyncio.get_running_loop()
        return lambda: loop.call_soon_threadsafe(self.abandon)


@register_transport("grpc")
def grpc_transport(settings) -> GrpcTransport:
    return GrpcTransport(settings.grpc_url, settings.target_model, settings.target_model_version, settings.grpc_cancel,
                         settings.idle_timeout_s, settings.loopback_header_map, settings.grpc_max_draining)
