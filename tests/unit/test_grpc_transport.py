"""How the gRPC transport turns what Triton sends into the errors clients see."""

import numpy as np
import pytest

from tritonchat.errors import BadRequestError, CancelledError, InternalError, UnavailableError
from tritonchat.transports.grpc import decode_tensor, encode_tensor, error_from_message, error_from_status


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Request for unknown model: 'vllm_model' is not found", UnavailableError),
        ("Request for unknown model: 'vllm_model' has no available versions", UnavailableError),
        ("Model 'vllm_model' version 1 is not ready", UnavailableError),
        ("Executor failed process requestId 3 due to the following error: engine fell over", InternalError),
    ],
)
def test_stream_error_messages(message, kind):
    error = error_from_message(message)
    assert type(error) is kind
    assert message in error.message


@pytest.mark.parametrize(
    ("code", "kind"),
    [("CANCELLED", CancelledError), ("UNAVAILABLE", UnavailableError), ("INVALID_ARGUMENT", BadRequestError),
     ("INTERNAL", InternalError)],
)
def test_call_status_codes(code, kind):
    assert type(error_from_status(code, "details")) is kind


@pytest.mark.parametrize(
    "value",
    [np.array([[b"caf\xc3\xa9", b""]], dtype=np.object_), np.array([[1, 2, 3]], dtype=np.int32),
     np.array([0.5], dtype=np.float32), np.array([[True]], dtype=np.bool_), np.array([[7]], dtype=np.uint64)],
)
def test_tensors_round_trip(value):
    datatype, raw = encode_tensor(value)
    decoded = decode_tensor(datatype, list(value.shape), raw)
    assert decoded.dtype == value.dtype and decoded.shape == value.shape
    assert decoded.tolist() == value.tolist()
