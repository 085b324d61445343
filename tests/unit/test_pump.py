"""ResponsePump: reader/writer threads, coalescing, cancellation, timeouts, exactly one FINAL."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tritonchat.backends import GenerationOutput
from tritonchat.errors import CancelledError, InternalError, OpenAIError, UnavailableError
from tritonchat.pump import ResponsePump
from tritonchat.stream import ChatResponseBuilder


class FakeSink:
    def __init__(self, send_delay: float = 0.0, cancel_after_sends: int | None = None):
        self.sent: list[tuple[str, bool]] = []
        self.errors: list[OpenAIError] = []
        self.send_delay = send_delay
        self.cancel_after_sends = cancel_after_sends
        self.done = threading.Event()

    def send(self, payload: str, final: bool) -> None:
        assert not self.done.is_set(), "nothing may be sent after FINAL"
        time.sleep(self.send_delay)
        self.sent.append((payload, final))
        if final:
            self.done.set()

    def send_error(self, error: OpenAIError) -> None:
        assert not self.done.is_set(), "nothing may be sent after FINAL"
        self.errors.append(error)
        self.done.set()

    def is_cancelled(self) -> bool:
        return self.cancel_after_sends is not None and len(self.sent) >= self.cancel_after_sends

    @property
    def payloads(self) -> list[dict]:
        return [json.loads(p) for p, _ in self.sent]


class FakeGeneration:
    def __init__(self, outputs, delay: float = 0.0, fail_with: BaseException | None = None, block: bool = False):
        self.outputs = outputs
        self.delay = delay
        self.fail_with = fail_with
        self.block = block
        self.cancelled = threading.Event()

    def __iter__(self):
        for output in self.outputs:
            if self.cancelled.is_set():
                return
            time.sleep(self.delay)
            yield output
        if self.fail_with:
            raise self.fail_with
        if self.block:
            self.cancelled.wait(10)

    def cancel(self) -> None:
        self.cancelled.set()


def outputs(*texts, reason="stop"):
    items = [GenerationOutput(text=t, completion_tokens=1, prompt_tokens=5) for t in texts]
    items[-1].finish_reason = reason
    return items


def builder(**kw) -> ChatResponseBuilder:
    return ChatResponseBuilder(completion_id="chatcmpl-t", created=1, model="m", system_fingerprint="fp", **kw)


def run(pump: ResponsePump, sink: FakeSink, timeout: float = 10) -> None:
    pump.start()
    assert sink.done.wait(timeout), "the pump never sent FINAL"


def content(payloads) -> str:
    return "".join(c["choices"][0]["delta"].get("content", "") for c in payloads if c["choices"])


def test_stream_sends_chunks_and_one_final():
    sink = FakeSink()
    pump = ResponsePump(builder(), [FakeGeneration(outputs("a", "b", "c"), delay=0.01)], sink, stream=True)
    run(pump, sink)
    assert content(sink.payloads) == "abc"
    assert [final for _, final in sink.sent] == [False] * (len(sink.sent) - 1) + [True]
    assert sink.payloads[-1]["choices"][0]["finish_reason"] == "stop"
    assert pump.outcome == "completed"


def test_non_stream_sends_exactly_one_final_completion():
    sink = FakeSink()
    run(ResponsePump(builder(), [FakeGeneration(outputs("a", "b"))], sink, stream=False), sink)
    assert len(sink.sent) == 1 and sink.sent[0][1] is True
    completion = sink.payloads[0]
    assert completion["choices"][0]["message"]["content"] == "ab"
    assert completion["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def test_waiting_outputs_are_merged_when_the_sender_is_slow():
    sink = FakeSink(send_delay=0.05)
    texts = [f"{i}," for i in range(40)]
    run(ResponsePump(builder(), [FakeGeneration(outputs(*texts), delay=0.002)], sink, stream=True), sink)
    assert content(sink.payloads) == "".join(texts)
    assert len(sink.sent) < 20, "outputs that arrived while a send was in progress were merged"


def test_generation_error_mid_stream_ends_with_that_error():
    sink = FakeSink()
    failing = FakeGeneration(outputs("a", "b"), delay=0.01, fail_with=InternalError("engine died"))
    failing.outputs[-1].finish_reason = None
    pump = ResponsePump(builder(), [failing], sink, stream=True)
    run(pump, sink)
    assert content(sink.payloads) == "ab"
    assert not any(final for _, final in sink.sent)
    assert [e.message for e in sink.errors] == ["engine died"]
    assert pump.outcome == "error"


def test_unexpected_exception_in_generation_becomes_internal_error():
    sink = FakeSink()
    run(ResponsePump(builder(), [FakeGeneration([], fail_with=RuntimeError("boom"))], sink, stream=True), sink)
    assert isinstance(sink.errors[0], InternalError) and "boom" in sink.errors[0].message


def test_client_cancellation_stops_generation_and_sends_final():
    sink = FakeSink(cancel_after_sends=3)
    generation = FakeGeneration(outputs(*["x"] * 1000), delay=0.005)
    pump = ResponsePump(builder(), [generation], sink, stream=True, cancel_check_interval=0.01)
    run(pump, sink)
    assert pump.outcome == "cancelled"
    assert isinstance(sink.errors[0], CancelledError)
    assert generation.cancelled.is_set()
    assert len(sink.sent) < 50


def test_silent_generation_times_out():
    sink = FakeSink()
    generation = FakeGeneration(outputs("a", reason=None), block=True)
    pump = ResponsePump(builder(), [generation], sink, stream=True, cancel_check_interval=0.02, idle_timeout=0.3)
    started = time.monotonic()
    run(pump, sink)
    assert 0.25 < time.monotonic() - started < 3
    assert isinstance(sink.errors[0], UnavailableError)
    assert generation.cancelled.is_set()


def test_stream_that_ends_without_finish_reason_is_an_error():
    sink = FakeSink()
    generation = FakeGeneration(outputs("a", reason=None))
    run(ResponsePump(builder(), [generation], sink, stream=True, require_finish_reason=True), sink)
    assert isinstance(sink.errors[0], InternalError)


def test_empty_generation_still_has_role_and_finish_chunks():
    sink = FakeSink()
    run(ResponsePump(builder(), [FakeGeneration([])], sink, stream=True), sink)
    deltas = [c["choices"][0]["delta"] for c in sink.payloads]
    assert deltas == [{"role": "assistant", "content": ""}, {}]
    assert sink.sent[-1][1] is True


def test_usage_chunk_is_final_when_requested():
    sink = FakeSink()
    run(ResponsePump(builder(include_usage=True), [FakeGeneration(outputs("a", "b"))], sink, stream=True), sink)
    last = sink.payloads[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 2
    assert sink.sent[-1][1] is True


@pytest.mark.parametrize("failure", ["send", "builder"])
def test_failure_while_sending_still_ends_the_request(failure):
    class BrokenSink(FakeSink):
        def send(self, payload, final):
            raise RuntimeError("sender broke")

    sink = BrokenSink() if failure == "send" else FakeSink()
    b = builder()
    if failure == "builder":
        b.stream_output = lambda *a: (_ for _ in ()).throw(ValueError("bad"))
    pump = ResponsePump(b, [FakeGeneration(outputs("a"))], sink, stream=True)
    run(pump, sink)
    assert pump.outcome == "error" and isinstance(sink.errors[0], InternalError)
