"""Streaming calls to the generation model through the server's own gRPC endpoint.

The alternative to BLS (`transport: grpc`): `openai_chat` opens one `ModelStreamInfer`
call per choice on the Triton server it runs in, from the stub's event loop, with no
thread per stream. Errors the generation model sends mid-stream arrive as errors.

Ending a call early: cancelling a `ModelStreamInfer` call while the server is writing its
responses races in Triton's gRPC frontend and aborts the whole server on the releases
listed below (`GRPC_CALL_ERROR_TOO_MANY_OPERATIONS`, `prior > 0`, SIGSEGV under a storm of
client disconnects). There a call that is no longer wanted is *drained* instead: read to
its end and discarded (the generation runs to its token budget), and cancelled only if the
generation model stays silent for the drain timeout (nothing is being written then).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator

import numpy as np

from ..errors import BadRequestError, CancelledError, InternalError, OpenAIError, UnavailableError

log = logging.getLogger(__name__)

# The first Triton release whose gRPC frontend survives cancelled ModelStreamInfer calls
# under load (see `cancel_is_safe`). Earlier releases drain calls instead of cancelling them.
SAFE_CANCEL_FROM = (2, 57, 0)
CANCEL_POLICIES = ("auto", "true", "false")


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.51.0' -> (2, 51, 0); anything unparsable -> () (sorts below every release)."""
    parts = []
    for piece in version.strip().split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def cancel_is_safe(policy: str, server_version: str) -> bool:
    """Whether `openai_chat` may cancel its gRPC calls to this server (`grpc_cancel` setting)."""
    if policy != "auto":
        return policy == "true"
    return version_tuple(server_version) >= SAFE_CANCEL_FROM

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


def error_from_status(code_name: str, details: str) -> OpenAIError:
    message = f"The generation model failed: {details}"
    if code_name == "CANCELLED":
        return CancelledError(f"The generation was cancelled: {details}")
    if code_name in ("UNAVAILABLE", "NOT_FOUND", "DEADLINE_EXCEEDED"):
        return UnavailableError(f"The generation model is unavailable: {details}")
    if code_name == "INVALID_ARGUMENT":
        return BadRequestError(message)
    return InternalError(message)


def error_from_message(message: str) -> OpenAIError:
    """An error response of the stream (Triton sends only its text there)."""
    if "is not ready" in message or "unknown model" in message.lower():
        return UnavailableError(f"The generation model is unavailable: {message}")
    return InternalError(f"The generation model failed: {message}")


class GrpcTransport:
    """One gRPC channel per model instance, created lazily on the event loop.

    `cancel_policy` is the `grpc_cancel` setting (auto: by server release); `drain_timeout`
    bounds how long a drained call may stay silent before it is cancelled after all (0: never).
    """

    def __init__(self, url: str, cancel_policy: str = "auto", drain_timeout: float = 600.0):
        self.url = url
        self.cancel_policy = cancel_policy
        self.drain_timeout = drain_timeout
        self.cancels: bool | None = None  # decided at the first request (`prepare`)
        self._deciding: asyncio.Future | None = None
        self._stub = None
        self._channel = None

    async def prepare(self) -> None:
        """Decides once whether calls are cancelled or drained (asks the server its release)."""
        if self.cancels is None:
            if self._deciding is None:
                self._deciding = asyncio.ensure_future(self._decide())
            await asyncio.shield(self._deciding)

    async def _decide(self) -> None:
        version = ""
        if self.cancel_policy == "auto":
            from tritonclient.grpc import service_pb2  # noqa: PLC0415

            try:
                metadata = await self._ensure_stub().ServerMetadata(service_pb2.ServerMetadataRequest(), timeout=10)
                version = metadata.version
            except Exception as exc:  # noqa: BLE001  (unknown release: the safe choice)
                log.warning("could not ask %s for its release (%s); gRPC calls will be drained, not cancelled",
                            self.url, exc)
        self.cancels = cancel_is_safe(self.cancel_policy, version)
        log.info("gRPC transport to %s (Triton %s): calls no longer wanted are %s", self.url, version or "?",
                 "cancelled" if self.cancels else "drained (see grpc_cancel)")

    def abandon(self, call) -> None:
        """On the event loop: the call's responses are no longer wanted.

        Cancels it where that is safe; otherwise its reader drains it, and it is cancelled
        only if it is still open after `drain_timeout` (a silent generation model).
        """
        if call.done():
            return
        if self.cancels:
            call.cancel()
        elif self.drain_timeout:
            asyncio.get_running_loop().call_later(self.drain_timeout, _cancel_if_open, call)

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

    def request(self, model: str, version: int, inputs: dict[str, np.ndarray], outputs: list[str], request_id: str):
        from tritonclient.grpc import service_pb2  # noqa: PLC0415

        request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
        if version > 0:
            request.model_version = str(version)
        for name, value in inputs.items():
            datatype, raw = encode_tensor(value)
            request.inputs.append(
                service_pb2.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=list(value.shape))
            )
            request.raw_input_contents.append(raw)
        for name in outputs:
            request.outputs.append(service_pb2.ModelInferRequest.InferRequestedOutputTensor(name=name))
        # Also forward a flag-only FINAL as an empty response, so the end is always seen.
        request.parameters["triton_enable_empty_final_response"].bool_param = True
        return request

    def open(self, request):
        """Start the call; returns it (an async iterator of responses with `cancel()`)."""
        stub = self._ensure_stub()

        async def requests():
            yield request

        # Errors arrive as stream messages; the call stays open until the model's FINAL.
        # (Not `triton_grpc_error: true`: with it, Triton 2.51 closes the call at the first
        # error, and a model that then sends its flag-only FINAL, as tensorrt_llm_bls does,
        # crashes the server with SIGSEGV in TRITONBACKEND_ResponseFactorySendFlags.)
        return stub.ModelStreamInfer(requests())

    async def responses(self, call) -> AsyncIterator[tuple[dict[str, np.ndarray], bool]]:
        """(outputs by name, is final) for each response of the call; errors become OpenAIError.

        Reads up to the end of the call (the server ends it right after the final response):
        a call object dropped before its end is cancelled by gRPC when it is collected.
        """
        import grpc  # noqa: PLC0415

        try:
            async for message in call:
                if message.error_message:
                    raise error_from_message(message.error_message)
                response = message.infer_response
                outputs = {
                    tensor.name: decode_tensor(tensor.datatype, list(tensor.shape), raw)
                    for tensor, raw in zip(response.outputs, response.raw_output_contents)
                }
                yield outputs, response.parameters["triton_final_response"].bool_param
        except grpc.aio.AioRpcError as exc:
            raise error_from_status(exc.code().name, exc.details() or str(exc)) from None
        except asyncio.CancelledError:
            raise CancelledError("The generation was cancelled.") from None

    @staticmethod
    async def drain(call) -> None:
        """Reads what is left of a call and discards it (ends when the call ends, also by cancel)."""
        try:
            async for _message in call:
                pass
        except Exception:  # noqa: BLE001  (nothing waits for these responses any more)
            log.debug("draining a gRPC call ended with an error", exc_info=True)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


def _cancel_if_open(call) -> None:
    if not call.done():
        log.warning("a drained gRPC call stayed silent; cancelling it")
        call.cancel()
