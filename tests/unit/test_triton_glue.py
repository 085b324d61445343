"""The Triton glue driven as Triton drives it (`initialize`, `execute`, `finalize`), with a
stand-in for `triton_python_backend_utils` and BLS streams the tests script: exactly one FINAL
per request, errors with the right Triton codes, cancellation, and finalize."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time

import numpy as np
import pytest

from tests.unit import fakes
from tritonchat.triton import OpenAIChatModel, OpenAICompletionsModel
from tritonchat.triton.sink import payload_text


def vllm_response(text: str, reason: str | None = None, tokens: int = 1) -> fakes.InferenceResponse:
    tensors = [
        fakes.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
        fakes.Tensor("finish_reason", np.array([str(reason).encode()], dtype=np.object_)),
        fakes.Tensor("num_input_tokens", np.array([7], dtype=np.uint32)),
        fakes.Tensor("num_output_tokens", np.array([tokens], dtype=np.uint32)),
    ]
    return fakes.InferenceResponse(tensors)


class Stub:
    """What Triton's Python stub does around a model: the lifecycle calls, `execute` from its
    main thread."""

    def __init__(self, monkeypatch, tiny_model, script, model_class=OpenAIChatModel, **parameters):
        self.calls: list = []
        self.iterators: list[fakes.ResponseIterator] = []

        def bls(request):
            self.calls.append(request.kwargs)
            iterator = script(request.kwargs, len(self.calls) - 1)
            self.iterators.append(iterator)
            return iterator

        monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fakes.make_pb_utils(bls))
        params = {"transport": "bls", "tokenizer": str(tiny_model), "served_model_name": "tiny",
                  "cancel_check_interval_ms": "10", **parameters}
        config = {"model_transaction_policy": {"decoupled": True},
                  "parameters": {k: {"string_value": v} for k, v in params.items()}}
        self.model = model_class()
        self.model.initialize({"model_name": "openai_chat", "model_config": json.dumps(config)})

    def execute(self, *requests: fakes.Request, timeout: float = 5.0) -> None:
        assert not asyncio.iscoroutinefunction(self.model.execute)  # see triton/model.py
        assert self.model.execute(list(requests)) is None  # a decoupled model answers through its senders only
        for request in requests:
            assert request.sender.final.wait(timeout), "no FINAL response"

    def close(self) -> None:
        self.model.finalize()


@pytest.fixture
def stub_factory(monkeypatch, tiny_model):
    stubs = []

    def make(script, **kwargs):
        stub = Stub(monkeypatch, tiny_model, script, **kwargs)
        stubs.append(stub)
        return stub

    yield make
    for stub in stubs:
        stub.close()


def chat(**fields) -> str:
    return json.dumps({"messages": [{"role": "user", "content": "Hi"}], **fields})


def hello(_kwargs, _index):
    return fakes.ResponseIterator([vllm_response("Hello"), vllm_response(" world", "stop")])


def test_auto_complete_config_declares_the_interface():
    calls = {}

    class Config:
        parameters = {}

        def as_dict(self):
            return {"parameters": self.parameters}

        def add_input(self, spec):
            calls["input"] = spec

        def add_output(self, spec):
            calls.setdefault("outputs", []).append(spec)

        def set_max_batch_size(self, size):
            calls["max_batch_size"] = size

        def set_model_transaction_policy(self, policy):
            calls["policy"] = policy

    config = Config()
    assert OpenAIChatModel.auto_complete_config(config) is config
    assert calls == {
        "input": {"name": "request", "data_type": "TYPE_STRING", "dims": [1]},
        "outputs": [{"name": "response", "data_type": "TYPE_STRING", "dims": [1]}],
        "max_batch_size": 0,
        "policy": {"decoupled": True},
    }
    calls.clear()
    config.parameters = {"text_output": {"string_value": "true"}}
    OpenAIChatModel.auto_complete_config(config)
    assert [spec["name"] for spec in calls["outputs"]] == ["response", "text_output"]


@pytest.mark.parametrize(("payload", "text"), [
    ({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}, ""),
    ({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hel"}},
                                                     {"index": 1, "delta": {"content": "lo"}}]}, "Hello"),
    ({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]}, ""),
    ({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, ""),
    ({"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 1}}, ""),
    ({"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}}]}, "Hi"),
    ({"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": None}}]}, ""),
    ({"object": "text_completion", "choices": [{"index": 0, "text": " there"}]}, " there"),
])
def test_payload_text_is_the_new_text(payload, text):
    assert payload_text(json.dumps(payload)) == text


def test_a_stream_ends_with_exactly_one_final(stub_factory):
    stub = stub_factory(hello)
    request = fakes.Request(chat(stream=True), request_id="r1")
    stub.execute(request)
    time.sleep(0.1)  # nothing may follow the FINAL
    flags = [flags for _, flags in request.sender.responses]
    assert flags.count(fakes.FINAL) == 1 and flags[-1] == fakes.FINAL
    payloads = request.sender.payloads()
    assert payloads[0]["id"] == "chatcmpl-r1"
    assert "".join(p["choices"][0]["delta"].get("content", "") for p in payloads) == "Hello world"
    assert stub.calls[0]["model_name"] == "vllm_model" and stub.calls[0]["request_id"] == "r1"
    assert request.cancel_checks_after_final == 0


def test_a_whole_completion_is_one_response(stub_factory):
    stub = stub_factory(hello)
    request = fakes.Request(chat())
    stub.execute(request)
    [(response, flags)] = request.sender.responses
    assert flags == fakes.FINAL
    completion = json.loads(response.output_tensors()[0].as_numpy()[0])
    assert completion["choices"][0]["message"]["content"] == "Hello world"
    assert completion["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}


@pytest.mark.parametrize(
    ("request_", "code", "param"),
    [
        (fakes.Request("{not json"), fakes.TritonError.INVALID_ARG, None),
        (fakes.Request(chat(temperature="hot")), fakes.TritonError.INVALID_ARG, "temperature"),
        (fakes.Request(chat(model="gpt-4o")), fakes.TritonError.NOT_FOUND, "model"),
        (fakes.Request(chat(), tensor_name="wrong"), fakes.TritonError.INVALID_ARG, None),
    ],
    ids=["bad-json", "bad-field", "unknown-model", "missing-input"],
)
def test_refused_requests_get_one_error_with_its_code(stub_factory, request_, code, param):
    stub = stub_factory(hello)
    stub.execute(request_)
    [(response, flags)] = request_.sender.responses
    assert flags == fakes.FINAL and response.has_error()
    assert response.error().code() == code
    assert json.loads(response.error().message())["error"]["param"] == param
    assert stub.calls == []  # the generation model was never called


def test_a_generation_error_mid_stream_ends_the_stream_with_it(stub_factory):
    def failing(_kwargs, _index):
        error = fakes.InferenceResponse([], fakes.TritonError("engine fell over", fakes.TritonError.INTERNAL))
        return fakes.ResponseIterator([vllm_response("Hel"), error])

    stub = stub_factory(failing)
    request = fakes.Request(chat(stream=True))
    stub.execute(request)
    [error] = request.sender.errors()
    assert error.code() == fakes.TritonError.INTERNAL and "engine fell over" in error.message()
    assert request.sender.responses[-1][1] == fakes.FINAL
    assert [flags for _, flags in request.sender.responses].count(fakes.FINAL) == 1


def test_an_unavailable_generation_model_is_a_503(stub_factory):
    def missing(_kwargs, _index):
        error = fakes.TritonError("Request for unknown model: 'vllm_model' is not found", fakes.TritonError.NOT_FOUND)
        return fakes.ResponseIterator([fakes.InferenceResponse([], error)])

    stub = stub_factory(missing)
    request = fakes.Request(chat())
    stub.execute(request)
    [error] = request.sender.errors()
    assert error.code() == fakes.TritonError.UNAVAILABLE
    assert json.loads(error.message())["error"]["code"] == "service_unavailable"


def test_a_client_that_goes_away_cancels_the_generation(stub_factory):
    def slow(_kwargs, _index):
        return fakes.ResponseIterator([vllm_response("x")] * 200, delay=0.01)

    stub = stub_factory(slow)
    request = fakes.Request(chat(stream=True), cancel_after=3)
    stub.execute(request)
    [error] = request.sender.errors()
    assert error.code() == fakes.TritonError.CANCELLED
    assert stub.iterators[0].cancelled.wait(2)  # ResponseIterator.cancel(), where the release has it
    deadline = time.monotonic() + 5
    while stub.iterators[0].read < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stub.iterators[0].read == 200  # read to its end all the same (see triton/bls.py)
    assert request.cancel_checks_after_final == 0


def test_n_choices_each_get_a_stream(stub_factory):
    stub = stub_factory(lambda kwargs, index: fakes.ResponseIterator([vllm_response(f"c{index}", "stop")]))
    request = fakes.Request(chat(n=3, seed=5), request_id="multi")
    stub.execute(request)
    [completion] = request.sender.payloads()
    assert sorted(c["message"]["content"] for c in completion["choices"]) == ["c0", "c1", "c2"]
    assert sorted(call["request_id"] for call in stub.calls) == ["multi.0", "multi.1", "multi.2"]
    sampling = [next(t for t in call["inputs"] if t.name() == "sampling_parameters") for call in stub.calls]
    seeds = sorted(json.loads(tensor.as_numpy()[0])["seed"] for tensor in sampling)
    assert seeds == [5, 6, 7]


def test_completions_model(stub_factory):
    stub = stub_factory(hello, model_class=OpenAICompletionsModel)
    request = fakes.Request(json.dumps({"prompt": "Say", "echo": True}))
    stub.execute(request)
    [completion] = request.sender.payloads()
    assert completion["object"] == "text_completion" and completion["choices"][0]["text"] == "SayHello world"


def test_a_model_that_is_not_decoupled_fails_to_load(monkeypatch, tiny_model):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fakes.make_pb_utils(hello))
    config = {"parameters": {"tokenizer": {"string_value": str(tiny_model)}}}
    with pytest.raises(Exception, match="must be decoupled"):
        OpenAIChatModel().initialize({"model_name": "openai_chat", "model_config": json.dumps(config)})


def test_finalize_stops_the_threads_it_started(stub_factory):
    before = set(threading.enumerate())
    stub = stub_factory(hello)
    stub.execute(fakes.Request(chat()))
    started = [t for t in set(threading.enumerate()) - before if t.name.startswith(("chat-sender", "chat-loop"))]
    assert {t.name.split("-")[1] for t in started} == {"sender", "loop"}
    stub.close()
    for thread in started:
        thread.join(2)
    assert not any(t.is_alive() for t in started)


def test_bls_reads_one_stream_at_a_time(stub_factory):
    """The Python backend stub deadlocks when one thread waits in a BLS iterator while another
    starts or drops a stream, so an instance runs its BLS streams one after the other."""
    active, most = [0], [0]
    lock = threading.Lock()

    class Counted(fakes.ResponseIterator):
        def __iter__(self):
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
            try:
                yield from super().__iter__()
            finally:
                with lock:
                    active[0] -= 1

    stub = stub_factory(lambda _kwargs, _index: Counted([vllm_response("a"), vllm_response("b", "stop")], delay=0.01))
    requests = [fakes.Request(chat(n=2, stream=True)) for _ in range(4)]
    stub.execute(*requests, timeout=10)
    assert len(stub.calls) == 8 and most[0] == 1
    for request in requests:
        text = {}
        for payload in request.sender.payloads():
            for choice in payload["choices"]:
                text[choice["index"]] = text.get(choice["index"], "") + (choice["delta"].get("content") or "")
        assert text == {0: "ab", 1: "ab"}


def test_a_silent_bls_stream_does_not_hold_its_instance_for_good(stub_factory):
    """Before 25.04 nothing ends a BLS stream the generation model never finishes: the request is
    abandoned after idle_timeout_s, and once that stream has been silent that long the instance
    takes its next stream."""
    unblock = threading.Event()

    class Hanging(fakes.ResponseIterator):
        def __iter__(self):
            yield vllm_response("x")
            unblock.wait(30)

    scripts = iter([Hanging([]), fakes.ResponseIterator([vllm_response("next", "stop")])])
    stub = stub_factory(lambda _kwargs, _index: next(scripts), idle_timeout_s="0.5")
    try:
        hung, after = fakes.Request(chat(stream=True)), fakes.Request(chat())
        stub.model.execute([hung])  # first, so that it takes the hanging stream
        deadline = time.monotonic() + 10
        while len(hung.sender.responses) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        stub.execute(after, timeout=10)
        assert hung.sender.final.wait(10)
        [error] = hung.sender.errors()
        assert error.code() == fakes.TritonError.UNAVAILABLE
        assert after.sender.payloads()[0]["choices"][0]["message"]["content"] == "next"
    finally:
        unblock.set()


def test_metrics_count_requests_tokens_and_latency(stub_factory):
    fakes.Metric.update_threads.clear()
    stub = stub_factory(hello)
    stub.execute(fakes.Request(chat(stream=True)), fakes.Request(chat()), fakes.Request("{not json"))
    time.sleep(0.1)  # the FINAL is sent just before the request is recorded
    family = sys.modules["triton_python_backend_utils"].MetricFamily
    model = {"model": "openai_chat"}
    assert family.value("tritonchat_requests_total", outcome="completed", reason="stop", **model) == 2
    assert family.value("tritonchat_requests_total", outcome="error", reason="invalid_request_error", **model) == 1
    assert family.value("tritonchat_prompt_tokens_total", **model) == 14
    assert family.value("tritonchat_completion_tokens_total", **model) == 4
    assert family.value("tritonchat_requests_in_flight", **model) == 0
    ttft = family.value("tritonchat_time_to_first_token_seconds", **model)
    assert len(ttft) == 2 and all(0 < t < 5 for t in ttft)
    assert len(family.value("tritonchat_time_per_output_token_seconds", **model)) == 2
    assert fakes.Metric.update_threads == {stub.model._loop_thread.ident}  # one thread: see triton/metrics.py


def test_first_token_stages_are_reported_when_asked(stub_factory):
    """`first_token_stages`: each streamed request's first token in four stages that add up to
    its time to first token; a whole answer has none. Off by default: no such metric."""
    stub = stub_factory(hello, first_token_stages="true")
    stub.execute(fakes.Request(chat(stream=True)), fakes.Request(chat()))
    time.sleep(0.1)
    family = sys.modules["triton_python_backend_utils"].MetricFamily
    model = {"model": "openai_chat"}
    stages = {stage: family.value("tritonchat_first_token_stage_seconds", stage=stage, **model)
              for stage in ("prepare", "wait", "handoff", "send")}
    assert all(len(values) == 1 and values[0] >= 0 for values in stages.values()), stages
    # The first three are the time to first token (to the first output); `send` comes after it.
    first_output = stages["prepare"][0] + stages["wait"][0] + stages["handoff"][0]
    ttfts = family.value("tritonchat_time_to_first_token_seconds", **model)
    assert any(abs(ttft - first_output) < 1e-6 for ttft in ttfts), (ttfts, stages)
    family.families.clear()
    stub_factory(hello).execute(fakes.Request(chat(stream=True)))
    assert "tritonchat_first_token_stage_seconds" not in sys.modules["triton_python_backend_utils"].MetricFamily.families


def test_an_instance_at_its_limit_refuses_at_once(stub_factory):
    """max_open_requests: beyond it a request gets a 503 right away, the others are served."""
    stub = stub_factory(lambda _kwargs, _index: fakes.ResponseIterator([vllm_response("x", "stop")], delay=0.3),
                        max_open_requests="2", transport="bls")
    requests = [fakes.Request(chat()) for _ in range(4)]
    started = time.monotonic()
    assert stub.model.execute(requests) is None
    time.sleep(0.05)
    refused = [r for r in requests if r.sender.final.is_set()]
    assert len(refused) == 2 and time.monotonic() - started < 0.2
    for request in refused:
        [error] = request.sender.errors()
        assert error.code() == fakes.TritonError.UNAVAILABLE and "max_open_requests" in error.message()
    for request in requests:
        assert request.sender.final.wait(5)
    assert sum(1 for r in requests if not r.sender.errors()) == 2
    again = fakes.Request(chat())
    stub.execute(again)
    assert not again.sender.errors()  # the served requests gave their places back


def test_slow_image_urls_do_not_hold_up_other_requests(stub_factory, tmp_path, tiny_model):
    """Six requests whose image URL does not answer yet, then a text-only request: the text-only
    one is answered while the downloads wait (they do not hold the threads that prepare requests),
    and the six are answered once their images arrive."""
    import http.server  # noqa: PLC0415

    from tests.vision import image_bytes, image_part, vision_tokenizer  # noqa: PLC0415

    release, arrived = threading.Event(), []
    png = image_bytes("PNG")

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            arrived.append(self.path)
            release.wait(20)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(png)))
            self.end_headers()
            self.wfile.write(png)

        def log_message(self, *args):
            pass

    images = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=images.serve_forever, daemon=True).start()
    prefix = f"http://127.0.0.1:{images.server_address[1]}/"
    try:
        stub = stub_factory(hello, tokenizer=str(vision_tokenizer(tiny_model, tmp_path / "vision")),
                            image_url_allowlist=prefix, image_fetch_timeout_s="20")
        slow = [fakes.Request(json.dumps({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"}, image_part(f"{prefix}{i}.png")]}]})) for i in range(6)]
        stub.model.execute(slow)
        deadline = time.monotonic() + 10
        while len(arrived) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        text = fakes.Request(chat())
        stub.model.execute([text])
        assert text.sender.final.wait(5), "a text-only request waited for other requests' images"
        assert not any(request.sender.final.is_set() for request in slow)
        release.set()
        for request in slow:
            assert request.sender.final.wait(10) and not request.sender.errors()
    finally:
        release.set()
        images.shutdown()
