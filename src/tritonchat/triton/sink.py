"""Where a request's payloads go: its Triton response sender, with OpenAI errors as Triton errors."""

from __future__ import annotations

import json

import numpy as np

from ..errors import OpenAIError

INPUT_NAME = "request"
OUTPUT_NAME = "response"
TEXT_OUTPUT_NAME = "text_output"


def pb():
    import triton_python_backend_utils as pb_utils  # noqa: PLC0415  (exists only inside Triton)

    return pb_utils


def triton_error(error: OpenAIError):
    """The OpenAI error object as the message, the status as Triton's code (which Triton's
    HTTP endpoints map back to the same status, from 24.11)."""
    utils = pb()
    codes = {
        400: utils.TritonError.INVALID_ARG,
        404: utils.TritonError.NOT_FOUND,
        499: getattr(utils.TritonError, "CANCELLED", utils.TritonError.INVALID_ARG),
        503: utils.TritonError.UNAVAILABLE,
    }
    return utils.TritonError(error.to_json(), codes.get(error.status, utils.TritonError.INTERNAL))


def request_body(request) -> bytes:
    """The one request body in the input tensor, or a 400."""
    from ..errors import BadRequestError  # noqa: PLC0415

    tensor = pb().get_input_tensor_by_name(request, INPUT_NAME)
    if tensor is None:
        raise BadRequestError(f"The input tensor {INPUT_NAME!r} is missing.")
    raw = tensor.as_numpy().reshape(-1)
    if raw.size != 1:
        raise BadRequestError(f"The input tensor {INPUT_NAME!r} must hold exactly one request body.")
    return raw[0]


def payload_text(payload: str) -> str:
    """The new text a response payload carries: its choices' `delta.content` (chunks),
    `message.content` (a whole chat completion) or `text` (Completions), in choice order;
    "" for role-only, usage and error payloads."""
    parts = []
    for choice in json.loads(payload).get("choices") or ():
        source = choice.get("delta") or choice.get("message") or choice
        text = source.get("content") if "content" in source else source.get("text")
        if isinstance(text, str):
            parts.append(text)
    return "".join(parts)


class TritonSink:
    """Sends one request's payloads through its Triton response sender; FINAL exactly once.
    With `text_output`, each response also carries the payload's new text as plain text."""

    def __init__(self, request, on_close=None, text_output: bool = False):
        self._pb = pb()
        self._text_output = text_output
        self._request = request
        self._sender = request.get_response_sender()
        self._on_close = on_close  # called once, when the FINAL response is sent
        self.closed = False

    def _close(self) -> None:
        self.closed = True
        if self._on_close is not None:
            self._on_close()

    def send(self, payload: str, final: bool) -> None:
        utils = self._pb
        tensors = [utils.Tensor(OUTPUT_NAME, np.array([payload.encode("utf-8")], dtype=np.object_))]
        if self._text_output:
            text = payload_text(payload).encode("utf-8")
            tensors.append(utils.Tensor(TEXT_OUTPUT_NAME, np.array([text], dtype=np.object_)))
        if final:
            # Before the send: a client may send its next request the moment it has this one.
            self._close()
        self._sender.send(
            utils.InferenceResponse(output_tensors=tensors),
            flags=utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0,
        )

    def send_error(self, error: OpenAIError) -> None:
        if self.closed:
            return
        utils = self._pb
        self._close()
        self._sender.send(
            utils.InferenceResponse(output_tensors=[], error=triton_error(error)),
            flags=utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )

    def is_cancelled(self) -> bool:
        return self._request.is_cancelled()
