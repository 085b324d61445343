"""Sender: building and sending, merging, cancellation, timeouts, exactly one FINAL."""

from __future__ import annotations

import threading
import time

from tritonchat.formats import GenerationOutput
from tritonchat.errors import CancelledError, InternalError, OpenAIError, UnavailableError
from tritonchat.sender import RequestState, Sender
from tritonchat.chunks import ChatResponseBuilder

from tests.unit.fakes import FakeSink


class FakeGeneration:
    """A producer thread feeding the sender, like a BLS reader."""

    def __init__(self, outputs, delay: float = 0.0, fail_with: OpenAIError | None = None, block: bool = False):
        self.outputs = outputs
        self.delay = delay
        self.fail_with = fail_with
        self.block = block
        self.cancelled = threading.Event()

    def start(self, sender: Sender, state: RequestState, index: int) -> None:
        state.add_cancel_hook(self.cancelled.set)
        threading.Thread(target=self._run, args=(sender, state, index), daemon=True).start()

    def _run(self, sender, state, index):
        for output in self.outputs:
            if self.cancelled.is_set() or state.done:
                return
            time.sleep(self.delay)
            sender.output(state, index, output)
        if self.fail_with:
            sender.fail(state, self.fail_with)
            return
        if self.block:
            self.cancelled.wait(10)
            return
        sender.end(state, index)


def outputs(*texts, reason="stop"):
    items = [GenerationOutput(text=t, completion_tokens=1, prompt_tokens=5) for t in texts]
    if items:
        items[-1].finish_reason = reason
    return items


def builder(**kw) -> ChatResponseBuilder:
    return ChatResponseBuilder(completion_id="chatcmpl-t", created=1, model="m", system_fingerprint="fp", **kw)


def run(generations, sink: FakeSink, *, stream=True, sender: Sender | None = None, timeout=10, **state_kw):
    sender = sender or Sender(cancel_check_interval=0.05)
    state = RequestState(builder(choices=len(generations)), sink, stream=stream, choices=len(generations), **state_kw)
    sender.start(state)
    for index, generation in enumerate(generations):
        generation.start(sender, state, index)
    assert sink.done.wait(timeout), "the sender never sent FINAL"
    assert state.done
    sender.stop()
    return state


def content(payloads) -> str:
    return "".join(c["choices"][0]["delta"].get("content", "") for c in payloads if c["choices"])


def test_stream_sends_chunks_and_one_final():
    sink = FakeSink()
    state = run([FakeGeneration(outputs("a", "b", "c"), delay=0.01)], sink)
    assert content(sink.payloads) == "abc"
    assert [final for _, final in sink.sent] == [False] * (len(sink.sent) - 1) + [True]
    assert sink.payloads[-1]["choices"][0]["finish_reason"] == "stop"
    assert state.outcome == "completed"


def test_non_stream_sends_exactly_one_final_completion():
    sink = FakeSink()
    run([FakeGeneration(outputs("a", "b"))], sink, stream=False)
    assert len(sink.sent) == 1 and sink.sent[0][1] is True
    completion = sink.payloads[0]
    assert completion["choices"][0]["message"]["content"] == "ab"
    assert completion["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def test_outputs_waiting_behind_a_slow_send_are_merged():
    sink = FakeSink(send_delay=0.05)
    texts = [f"{i}," for i in range(40)]
    run([FakeGeneration(outputs(*texts), delay=0.002)], sink)
    assert content(sink.payloads) == "".join(texts)
    assert len(sink.sent) < 20, "outputs that arrived during a send went out together"


def test_choices_stream_concurrently_and_the_last_one_sends_final():
    sink = FakeSink()
    generations = [FakeGeneration(outputs(*[f"{i}{k}" for k in range(5)]), delay=0.002 * (i + 1)) for i in range(3)]
    run(generations, sink)
    for i in range(3):
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in sink.payloads if c["choices"][0]["index"] == i)
        assert text == "".join(f"{i}{k}" for k in range(5))
    finishing = [c for c in sink.payloads if c["choices"][0]["finish_reason"]]
    assert sorted(c["choices"][0]["index"] for c in finishing) == [0, 1, 2]
    assert [final for _, final in sink.sent].count(True) == 1 and sink.sent[-1][1]


def test_generation_error_mid_stream_ends_with_that_error():
    sink = FakeSink()
    failing = FakeGeneration(outputs("a", "b"), delay=0.01, fail_with=InternalError("engine died"))
    state = run([failing], sink)
    assert content(sink.payloads) == "ab"
    assert not any(final for _, final in sink.sent)
    assert [e.message for e in sink.errors] == ["engine died"]
    assert state.outcome == "error"


def test_client_cancellation_stops_generation_and_sends_final():
    sink = FakeSink(cancel_after_sends=3)
    generation = FakeGeneration(outputs(*["x"] * 1000), delay=0.005)
    state = run([generation], sink, sender=Sender(cancel_check_interval=0.01))
    assert state.outcome == "cancelled"
    assert isinstance(sink.errors[0], CancelledError)
    assert generation.cancelled.is_set()
    assert len(sink.sent) < 50


def test_cancellation_while_waiting_for_the_generation_model():
    class CancelledSink(FakeSink):
        def is_cancelled(self):
            return True

    sink = CancelledSink()
    generation = FakeGeneration(outputs("a", reason=None), block=True)
    state = run([generation], sink, sender=Sender(cancel_check_interval=0.02))
    assert state.outcome == "cancelled" and isinstance(sink.errors[0], CancelledError)
    assert generation.cancelled.is_set()


def test_no_cancellation_check_after_final():
    class StrictSink(FakeSink):
        def is_cancelled(self):
            assert not self.done.is_set(), "asked about cancellation after FINAL"
            return False

    sink = StrictSink()
    sender = Sender(cancel_check_interval=0.0)
    for _ in range(20):
        sink = StrictSink()
        state = RequestState(builder(), sink, stream=True)
        sender.start(state)
        FakeGeneration(outputs("a", "b")).start(sender, state, 0)
        assert sink.done.wait(5)
    time.sleep(0.05)
    sender.stop()


def test_silent_generation_times_out():
    sink = FakeSink()
    generation = FakeGeneration(outputs("a", reason=None), block=True)
    started = time.monotonic()
    run([generation], sink, sender=Sender(cancel_check_interval=0.02, idle_timeout=0.3))
    assert 0.25 < time.monotonic() - started < 3
    assert isinstance(sink.errors[0], UnavailableError)
    assert generation.cancelled.is_set()


def test_stream_that_ends_without_finish_reason_is_an_error():
    sink = FakeSink()
    run([FakeGeneration(outputs("a", reason=None))], sink, require_finish_reason=True)
    assert isinstance(sink.errors[0], InternalError)


def test_empty_generation_still_has_role_and_finish_chunks():
    sink = FakeSink()
    run([FakeGeneration([])], sink)
    deltas = [c["choices"][0]["delta"] for c in sink.payloads]
    assert deltas == [{"role": "assistant", "content": ""}, {}]
    assert sink.sent[-1][1] is True


def test_usage_chunk_is_final_when_requested():
    sink = FakeSink()
    sender = Sender()
    state = RequestState(builder(include_usage=True), sink, stream=True)
    sender.start(state)
    FakeGeneration(outputs("a", "b")).start(sender, state, 0)
    assert sink.done.wait(5)
    last = sink.payloads[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 2
    assert sink.sent[-1][1] is True
    sender.stop()


def test_failure_while_sending_still_ends_the_request():
    class BrokenSink(FakeSink):
        def send(self, payload, final):
            raise RuntimeError("sender broke")

    sink = BrokenSink()
    state = run([FakeGeneration(outputs("a"))], sink)
    assert state.outcome == "error" and isinstance(sink.errors[0], InternalError)


def content_chunks(payloads, index=0) -> list[str]:
    return [c["choices"][0]["delta"]["content"] for c in payloads
            if c["choices"] and c["choices"][0]["index"] == index and c["choices"][0]["delta"].get("content")]


def test_stream_interval_sends_the_first_output_alone_then_groups_of_n_tokens():
    sink = FakeSink()
    texts = [f"{i}," for i in range(10)]
    run([FakeGeneration(outputs(*texts), delay=0.005)], sink, stream_interval=4)
    # vLLM's rule: the first token at once, then every 4 tokens, the rest when the stream ends.
    assert content_chunks(sink.payloads) == ["0,", "1,2,3,4,", "5,6,7,8,", "9,"]
    assert sink.payloads[-1]["choices"][0]["finish_reason"] == "stop"


def test_stream_interval_counts_tokens_not_outputs():
    sink = FakeSink()
    items = [GenerationOutput(text=t, completion_tokens=n) for t, n in [("a", 1), ("bb", 2), ("ccc", 3), ("d", 1)]]
    items[-1].finish_reason = "stop"
    run([FakeGeneration(items, delay=0.005)], sink, stream_interval=3)
    assert content_chunks(sink.payloads) == ["a", "bbccc", "d"]


def test_stream_interval_sends_what_it_held_before_an_error():
    sink = FakeSink()
    failing = FakeGeneration(outputs("a", "b", "c"), delay=0.005, fail_with=InternalError("engine died"))
    state = run([failing], sink, stream_interval=8)
    assert content_chunks(sink.payloads) == ["a", "bc"]
    assert [e.message for e in sink.errors] == ["engine died"] and state.outcome == "error"


def test_stream_interval_holds_each_choice_on_its_own():
    sink = FakeSink()
    generations = [FakeGeneration(outputs(*[f"{i}{k}" for k in range(7)]), delay=0.003) for i in range(2)]
    run(generations, sink, stream_interval=3)
    for i in range(2):
        assert content_chunks(sink.payloads, i) == [f"{i}0", f"{i}1{i}2{i}3", f"{i}4{i}5{i}6"]
    assert [final for _, final in sink.sent].count(True) == 1 and sink.sent[-1][1]


def test_stream_interval_does_not_apply_without_stream():
    sink = FakeSink()
    state = run([FakeGeneration(outputs("a", "b"))], sink, stream=False, stream_interval=4)
    assert state.stream_interval == 1
    assert sink.payloads[0]["choices"][0]["message"]["content"] == "ab"
