"""Streaming calls to the generation model through the server's own gRPC endpoint.

`transport: grpc` (the default): `openai_chat` opens one `ModelStreamInfer` call per choice on
the Triton server it runs in, from the stub's event loop, with no thread per stream. Errors
the generation model sends mid-stream arrive as stream messages (see `open`).

Giving a call up: cancelling `ModelStreamInfer` calls while the server writes their responses
races in Triton's gRPC frontend and aborts the whole server (seen on 2.51 under a storm of
client disconnects: `GRPC_CALL_ERROR_TOO_MANY_OPERATIONS`, `prior > 0`, SIGSEGV; no later
release is known to be free of it). So a call no longer wanted is drained: read to its end and
discarded (the generation runs to its token budget), and cancelled only if it stays silent for
the drain timeout (nothing is being written then), or always with `grpc_cancel: true`.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator, Callable

import numpy as np

from ..errors import CancelledError
from ..service import TargetCall
from .base import Outputs, error_for

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
                 headers: dict[str, str] | None = None):
        self.url = url
        # Triton's restricted gRPC protocols read the key from `triton-grpc-protocol-<key>`.
        self.metadata = tuple((f"triton-grpc-protocol-{name}", value) for name, value in (headers or {}).items())
        self.model = model
        self.version = version
        self.cancel = cancel
        self.drain_timeout = drain_timeout  # 0: never cancel a drained call
        self._stub = None
        self._channel = None
        try:  # checked at model load, not at the first request
            import tritonclient.grpc  # noqa: F401, PLC0415
        except ImportError as exc:
            raise RuntimeError(
                "transport: grpc needs tritonclient[grpc], which is not installed here; install "
                "`tritonchat[grpc]`, or use transport: http (the default)") from exc

    def _ensure_stub(self):
        if self._stub is None:
            import grpc  # noqa: PLC0415  (only with this transport)
            from tritonclient.grpc import service_pb2_grpc  # noqa: PLC0415

            self._channel = grpc.aio.insecure_channel(
                self.url,
                options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
            )
            self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
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
        stub = self._ensure_stub()
        request = self.request(call)

        async def requests():
            yield request

        # Errors arrive as stream messages; the call stays open until the model's FINAL.
        # (Not `triton_grpc_error: true`: with it, Triton 2.51 closes the call at the first
        # error, and a model that then sends its flag-only FINAL, as tensorrt_llm_bls does,
        # crashes the server with SIGSEGV in TRITONBACKEND_ResponseFactorySendFlags.)
        return GrpcStream(self, stub.ModelStreamInfer(requests(), metadata=self.metadata or None))

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


class GrpcStream:
    """One `ModelStreamInfer` call carrying one request."""

    def __init__(self, transport: GrpcTransport, call):
        self.transport = transport
        self.call = call

    async def __aiter__(self) -> AsyncIterator[Outputs]:
        """The outputs of each response, up to the end of the call (the server ends it right
        after the final response; a call object dropped before its end would be cancelled by
        gRPC when it is collected)."""
        import grpc  # noqa: PLC0415

        try:
            async for message in self.call:
                if message.error_message:
                    raise error_for(None, message.error_message)
                yield response_outputs(message.infer_response)
        except grpc.aio.AioRpcError as exc:
            raise error_for(exc.code().name, exc.details() or str(exc)) from None
        except asyncio.CancelledError:
            raise CancelledError("The generation was cancelled.") from None

    def abandon(self) -> None:
        if self.call.done():
            return
        if self.transport.cancel:
            self.call.cancel()
        elif self.transport.drain_timeout:
            asyncio.get_running_loop().call_later(self.transport.drain_timeout, self._cancel_if_open)

    def _cancel_if_open(self) -> None:
        if not self.call.done():
            log.warning("a drained gRPC call stayed silent for %g s; cancelling it", self.transport.drain_timeout)
            self.call.cancel()

    async def released(self) -> None:
        """Reads what is left of the call and discards it (ends when the call ends, also by cancel)."""
        try:
            async for _message in self.call:
                pass
        except (Exception, asyncio.CancelledError):  # noqa: BLE001  (nothing waits for these responses)
            log.debug("draining a gRPC call ended with an error", exc_info=True)

    def cancel_hook(self) -> Callable[[], None]:
        loop = asyncio.get_running_loop()
        return lambda: loop.call_soon_threadsafe(self.abandon)
