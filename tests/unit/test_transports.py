"""The transports' shared parts: the one reading loop (`pump`), the one error mapping, and the
gRPC transport's tensor encoding."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from tests.unit.fakes import FakeSink
from tests.unit.test_sender import builder
from tritonchat.errors import BadRequestError, CancelledError, InternalError, NotFoundError, UnavailableError
from tritonchat.formats import Decoder, GenerationOutput
from tritonchat.sender import RequestState, Sender
from tritonchat.sender import pump
from tritonchat.transports.base import error_for
from tritonchat.transports.grpc import decode_tensor, encode_tensor


@pytest.mark.parametrize(
    ("code", "message", "kind"),
    [
        (None, "Request for unknown model: 'vllm_model' is not found", UnavailableError),
        (None, "Request for unknown model: 'vllm_model' has no available versions", UnavailableError),
        (None, "Model 'vllm_model' version 1 is not ready", UnavailableError),
        ("NOT_FOUND", "Request for unknown model: 'vllm_model' is not found", UnavailableError),
        (None, "Executor failed process requestId 3 due to the following error: engine fell over", InternalError),
        ("CANCELLED", "details", CancelledError),
        ("UNAVAILABLE", "details", UnavailableError),
        ("DEADLINE_EXCEEDED", "details", UnavailableError),
        ("INVALID_ARGUMENT", "details", BadRequestError),
        ("INVALID_ARG", "details", BadRequestError),
        ("NOT_FOUND", "no such adapter", NotFoundError),
        ("INTERNAL", "details", InternalError),
    ],
)
def test_generation_model_errors(code, message, kind):
    """gRPC status names, BLS error codes and bare stream messages meet in one mapping."""
    error = error_for(code, message)
    assert type(error) is kind
    assert message in error.message


@pytest.mark.parametrize("message", ["Error generating stream: ", ""])
def test_a_generation_error_without_a_reason_says_where_to_look(message):
    error = error_for("INTERNAL", message)
    assert type(error) is InternalError and "no reason given" in error.message and "server log" in error.message


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


class FakeStream:
    """A target stream of scripted responses (text per response; an exception raises)."""

    def __init__(self, items, delay: float = 0.0):
        self.items = list(items)
        self.delay = delay
        self.read = 0
        self.abandoned = False
        self.released_called = False

    async def __aiter__(self):
        for item in self.items:
            await asyncio.sleep(self.delay)
            self.read += 1
            if isinstance(item, Exception):
                raise item
            yield {"text": item}

    def abandon(self):
        self.abandoned = True

    async def released(self):
        self.released_called = True

    def cancel_hook(self):
        return self.abandon


class TextDecoder(Decoder):
    """Text per response; `stop_at` ends the generation from the text (like a stop string)."""

    def __init__(self, stop_at: str | None = None):
        self.stop_at = stop_at
        self.finished = False

    def decode(self, outputs):
        self.finished = outputs["text"] == self.stop_at
        return GenerationOutput(text=outputs["text"], completion_tokens=1,
                                finish_reason="stop" if self.finished else None)

    def end(self):
        return None if self.finished else GenerationOutput(finish_reason="stop")


def run_pump(stream, decoder, stream_mode=True, cancel_after: int | None = None):
    sink = FakeSink(cancel_after_sends=cancel_after)
    sender = Sender(cancel_check_interval=0.01)
    state = RequestState(builder(), sink, stream=stream_mode)
    state.add_cancel_hook(stream.cancel_hook())
    sender.start(state)
    asyncio.run(pump(sender, state, 0, stream, decoder))
    assert sink.done.wait(5)
    sender.stop()
    return sink


def test_a_stream_read_to_its_end_is_not_abandoned():
    stream = FakeStream(["a", "b"])
    sink = run_pump(stream, TextDecoder())
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in sink.payloads) == "ab"
    assert sink.sent[-1][1] is True
    assert not stream.abandoned and not stream.released_called


def test_text_that_ends_the_generation_abandons_the_stream():
    stream = FakeStream(["a", "STOP", "never read"])
    sink = run_pump(stream, TextDecoder(stop_at="STOP"))
    assert stream.read == 2 and stream.abandoned and stream.released_called
    assert sink.payloads[-1]["choices"][0]["finish_reason"] == "stop"


def test_an_error_mid_stream_fails_the_request_and_abandons_the_stream():
    stream = FakeStream(["a", error_for(None, "engine fell over"), "b"])
    sink = run_pump(stream, TextDecoder())
    assert [type(e) for e in sink.errors] == [InternalError]
    assert stream.abandoned and stream.released_called


def test_a_request_that_ended_abandons_its_stream():
    """The client went away: the sender ends the request (its cancel hook abandons the
    stream), and the reading loop stops at the next response."""
    stream = FakeStream(["a"] * 50, delay=0.01)
    sink = run_pump(stream, TextDecoder(), cancel_after=2)
    assert [type(e) for e in sink.errors] == [CancelledError]
    assert stream.abandoned and stream.released_called and stream.read < 50
    assert json.loads(sink.sent[0][0])["choices"][0]["delta"]["role"] == "assistant"


@pytest.mark.parametrize("text", ['{"error": "Error generating stream: scripted failure"}',
                                  'data: {"error":"Error generating stream: scripted failure"}\n\n'])
def test_a_refused_generate_stream_reads_as_the_models_error(text):
    """Triton 2.51 answers an error that comes before any response with its status and the
    error as an event; either way the message is the generation model's, without the framing."""
    from tritonchat.transports.http import HttpStream  # noqa: PLC0415

    error = HttpStream._error(400, text)
    assert type(error) is InternalError
    assert error.message == "The generation model failed: Error generating stream: scripted failure"
