"""The in-process engine (`engine: inprocess`) without Triton or a real engine: the shared driver's
pieces (engine arguments, SamplingParams, outputs read as the vLLM backend's tensors are read),
the settings a model with its own engine gets, and the whole model driven as Triton drives it in
front of a scripted stand-in for vLLM's `AsyncLLM`: outputs, cancellation that aborts the engine
request, a dead engine that fails requests with a 503 and has the model unloaded, finalize.
(The real engine on the tiny model: tests/integration/test_inprocess.py.)"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from collections import namedtuple
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.unit import fakes
from tritonchat.engine.driver import EngineConfig, SamplingParamsError, build_sampling_params, device_environment
from tritonchat.engine.outputs import DeltaTracker, generation_output, logprobs_json, token_logprobs
from tritonchat.errors import ConfigError
from tritonchat.formats.vllm import parse_logprobs
from tritonchat.transports import inprocess
from tritonchat.triton import OpenAIChatModel, OpenAICompletionsModel
from tritonchat.triton import engine as triton_engine

Logprob = namedtuple("Logprob", "logprob rank decoded_token")


@dataclass
class Completion:
    text: str = ""
    token_ids: list = field(default_factory=list)
    logprobs: list | None = None
    finish_reason: str | None = None
    cumulative_logprob: float | None = None


@dataclass
class Output:
    outputs: list
    prompt_token_ids: list = field(default_factory=lambda: [1] * 7)
    finished: bool = False
    prompt: str = ""


# ---- outputs ---------------------------------------------------------------------------------------


POSITIONS = [
    {5: Logprob(-0.25, 2, " a"), 9: Logprob(-0.1, 1, " b")},  # sampled token first, not the likeliest
    {7: Logprob(-math.inf, 1, None)},  # masked out by a constraint; no decoded text
    {3: Logprob(-12000.0, None, "é")},
]


def test_logprobs_read_as_the_backends_json_is_read():
    """What the chat layer reads from the engine's log probabilities directly equals what it reads
    from the vLLM backend's `logprobs` tensor made of them (sorted by rank, clamped at -9999)."""
    assert token_logprobs(POSITIONS) == parse_logprobs(logprobs_json(POSITIONS).decode())
    [first, second, third] = token_logprobs(POSITIONS)
    assert (first.token_id, first.token, [t[0] for t in first.top]) == (5, " a", [9, 5])
    assert second.logprob == third.logprob == -9999.0


def test_the_delta_tracker_gives_what_each_cumulative_output_adds():
    tracker = DeltaTracker()
    outputs = [Completion("Hel", [1], [POSITIONS[0]]), Completion("A", [4], None)]
    assert tracker.new_text(outputs) == ["Hel", "A"]
    assert tracker.new_token_counts(outputs) == [1, 1]
    assert tracker.new_logprobs(outputs) == [[POSITIONS[0]], None]
    outputs = [Completion("Hello", [1, 2, 3], POSITIONS), Completion("AB", [4, 6], None)]
    assert tracker.new_text(outputs) == ["lo", "B"]
    assert tracker.new_token_counts(outputs) == [2, 1]
    assert tracker.new_logprobs(outputs) == [POSITIONS[1:], None]


def test_a_delta_output_is_one_generation_output():
    output = generation_output(Output([Completion(" river", [8, 9], POSITIONS[:2], "length")], finished=True))
    assert (output.text, output.completion_tokens, output.prompt_tokens, output.finish_reason) == (
        " river", 2, 7, "length")
    assert output.logprobs == token_logprobs(POSITIONS[:2])
    assert generation_output(Output([Completion("x", [1])])).logprobs is None


# ---- engine arguments and sampling parameters -------------------------------------------------------


def write_engine(version_dir: Path, args: dict, adapters: dict | None = None) -> Path:
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / "model.json").write_text(json.dumps(args))
    if adapters is not None:
        (version_dir / "multi_lora.json").write_text(json.dumps(adapters))
    return version_dir


def test_engine_config_reads_model_json_and_the_adapters(tmp_path):
    config = EngineConfig.read(write_engine(tmp_path / "1", {"model": "m", "enable_lora": "true"}, {"a": "/a", "b": "/b"}))
    assert config.lora_names == ["a", "b"] and config.lora_refusal("b") is None
    assert config.lora_refusal("c") == "LoRA c is not supported, we currently support ['a', 'b']"
    assert EngineConfig.read(write_engine(tmp_path / "2", {"model": "m"})).lora_refusal("a") == "LoRA feature is not enabled."
    with pytest.raises(FileNotFoundError, match="multi_lora.json"):
        EngineConfig.read(write_engine(tmp_path / "3", {"model": "m", "enable_lora": True}))
    with pytest.raises(FileNotFoundError, match="'model.json' containing vllm engine args"):
        EngineConfig.read(tmp_path / "4")


def test_kind_gpu_takes_single_gpu_engines_only(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    config = EngineConfig(tmp_path, {"tensor_parallel_size": 2})
    device_environment("MODEL", 0, config)  # KIND_MODEL: the engine places itself
    with pytest.raises(ValueError, match="KIND_MODEL"):
        device_environment("GPU", 1, config)
    device_environment("GPU", 1, EngineConfig(tmp_path, {}))
    import os  # noqa: PLC0415

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"


def test_sampling_params_from_the_backends_json():
    kinds = pytest.importorskip("vllm.sampling_params").RequestOutputKind
    params, lora = build_sampling_params(json.dumps({
        "max_tokens": "5", "temperature": "0.5", "lora_name": "x",
        "structured_outputs": json.dumps({"choice": ["a", "b"]})}), kinds.DELTA)
    assert (params.max_tokens, params.temperature, lora) == (5, 0.5, "x")
    assert params.structured_outputs.choice == ["a", "b"]
    assert params.output_kind == kinds.DELTA
    old_key, _ = build_sampling_params({"guided_decoding": json.dumps({"regex": "[ab]"})})
    assert old_key.structured_outputs.regex == "[ab]"
    for bad in ('{"no_such_field": 1}', '{"max_tokens": "many"}', "not json"):
        with pytest.raises(SamplingParamsError):
            build_sampling_params(bad)
    with pytest.raises(SamplingParamsError):  # the local backend's release knows one key only
        build_sampling_params({"guided_decoding": "{}"}, constraint_keys=("structured_outputs",))


# ---- settings ----------------------------------------------------------------------------------------


def test_a_model_with_its_own_engine_reads_its_own_model_json(tmp_path, tiny_model):
    version_dir = write_engine(tmp_path / "chat" / "1", {
        "model": str(tiny_model), "served_model_name": ["tiny-chat", "alias"], "max_model_len": 1024,
        "enable_lora": True}, {"tiny-lora": "/adapters/tiny"})
    # A vllm_model beside it with other arguments must not be read.
    write_engine(tmp_path / "vllm_model" / "1", {"model": "/elsewhere", "max_model_len": 8})
    settings = triton_engine.model_settings({"engine": "inprocess", "lora_separator": ":"},
                                            {"model_repository": str(tmp_path / "chat"), "model_version": "1"})
    assert (settings.transport, settings.engine_dir) == ("inprocess", str(version_dir))
    assert (settings.tokenizer, settings.served_model_name, settings.max_model_len) == (str(tiny_model), "tiny-chat", 1024)
    assert settings.lora_adapters == ("tiny-lora",)
    given = inprocess.inprocess_settings({"engine": "inprocess", "served_model_name": "mine", "max_model_len": "512"},
                                         version_dir)
    assert (given.served_model_name, given.max_model_len) == ("mine", 512)
    with pytest.raises(ConfigError, match="request_format must be vllm"):
        inprocess.inprocess_settings({"engine": "inprocess", "request_format": "trtllm"}, version_dir)
    with pytest.raises(ConfigError, match="'engine' must be one of target, inprocess"):
        triton_engine.model_settings({"engine": "elsewhere", "tokenizer": str(tiny_model)}, {})


# ---- the model in front of a scripted engine ------------------------------------------------------------


class Collector:
    """vLLM's RequestOutputCollector as the transport uses it."""

    def __init__(self):
        self.items: list = []
        self.ready = asyncio.Event()

    def put(self, item) -> None:
        self.items.append(item)
        self.ready.set()

    def get_nowait(self):
        if not self.items:
            return None
        item = self.items.pop(0)
        if not self.items:
            self.ready.clear()
        if isinstance(item, Exception):
            raise item
        return item

    async def get(self):
        while not self.items:
            await self.ready.wait()
        return self.get_nowait()


class EngineDeadError(Exception):
    """Named as vLLM's."""


class ScriptedEngine:
    """AsyncLLM as the transport uses it: each request gets `pieces` outputs, `interval` apart."""

    def __init__(self, pieces: int = 3, interval: float = 0.0):
        self.pieces, self.interval = pieces, interval
        self.requests: dict[str, tuple] = {}
        self.collectors: dict[str, Collector] = {}
        self.aborted: list[str] = []
        self.errored = False
        self.shut_down = False

    async def get_supported_tasks(self):
        return ("generate",)

    async def add_request(self, request_id, prompt, params, lora_request=None):
        if self.errored:
            raise EngineDeadError()
        collector = Collector()
        self.requests[request_id] = (prompt, params, lora_request)
        self.collectors[request_id] = collector
        asyncio.get_running_loop().create_task(self._produce(request_id, params, collector))
        return collector

    async def _produce(self, request_id, params, collector) -> None:
        final_only = params.output_kind.name == "FINAL_ONLY"
        text = ""
        for i in range(self.pieces):
            await asyncio.sleep(self.interval)
            if request_id not in self.collectors or self.errored:
                return
            last = i == self.pieces - 1
            piece = f" t{i}"
            text += piece
            if final_only and not last:
                continue
            shown = text if final_only else piece
            tokens = list(range(i + 1)) if final_only else [i]
            logprobs = [POSITIONS[0]] * len(tokens) if params.logprobs is not None else None
            collector.put(Output([Completion(shown, tokens, logprobs, "length" if last else None)], finished=last))
        self.collectors.pop(request_id, None)

    async def abort(self, request_id):
        self.aborted.append(request_id)
        collector = self.collectors.pop(request_id, None)
        if collector is not None:
            collector.put(Output([Completion("", [], None, "abort")], finished=True))

    def get_num_unfinished_requests(self) -> int:
        return len(self.collectors)

    def die(self, exit_code: int | None = None) -> None:
        """The engine core exits (with `exit_code`, as vLLM's process manager reports it; None:
        this engine does not say)."""
        self.errored = True
        if exit_code is not None:
            from types import SimpleNamespace  # noqa: PLC0415

            process = SimpleNamespace(exitcode=exit_code)
            self.engine_core = SimpleNamespace(resources=SimpleNamespace(
                engine_manager=SimpleNamespace(processes=[process])))
        for collector in self.collectors.values():
            collector.put(EngineDeadError())

    def shutdown(self, timeout=None):
        self.shut_down = True


@pytest.fixture
def engine_model(monkeypatch, tmp_path, tiny_model):
    """`make(engine, model_class=..., **parameters)`: an initialized model with `engine: inprocess`
    in front of the scripted engine; `model.unloaded` lists its requests to be unloaded."""
    pytest.importorskip("vllm")
    models = []

    def make(engine: ScriptedEngine, model_class=OpenAIChatModel, **parameters):
        async def create(args):
            assert args["model"] == str(tiny_model)
            return engine

        async def render(_engine, text, images=None):
            return {"prompt": text, "images": images}

        pb_utils = fakes.make_pb_utils(lambda request: None)
        unloaded = []
        pb_utils.unload_model = unloaded.append
        monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb_utils)
        monkeypatch.setattr(inprocess, "create_engine", create)
        monkeypatch.setattr(inprocess, "render_prompt", render)
        monkeypatch.setattr(inprocess, "freeze_gc", lambda: None)
        monkeypatch.setattr(inprocess, "WATCH_INTERVAL_S", 0.05)
        monkeypatch.setattr(triton_engine, "prepare_process", lambda: None)
        model_dir = tmp_path / f"chat{len(models)}"
        write_engine(model_dir / "1", {"model": str(tiny_model), "served_model_name": "tiny"})
        params = {"engine": "inprocess", "cancel_check_interval_ms": "10", **parameters}
        config = {"model_transaction_policy": {"decoupled": True},
                  "parameters": {k: {"string_value": v} for k, v in params.items()}}
        model = model_class()
        model.initialize({"model_name": "openai_chat", "model_config": json.dumps(config),
                          "model_repository": str(model_dir), "model_version": "1"})
        model.unloaded = unloaded
        model.metric = pb_utils.MetricFamily
        models.append(model)
        return model

    yield make
    for model in models:
        model.finalize()


def run(model, *requests: fakes.Request, timeout: float = 5.0) -> None:
    assert model.execute(list(requests)) is None
    for request in requests:
        assert request.sender.final.wait(timeout), "no FINAL response"


def chat(**fields) -> str:
    return json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, **fields})


def running(model) -> float:
    return model.metric.value("vllm:num_requests_running", model="openai_chat", version="1")


def test_streams_read_the_engines_delta_outputs(engine_model):
    engine = ScriptedEngine(pieces=3)
    model = engine_model(engine)
    request = fakes.Request(chat(stream=True, stream_options={"include_usage": True}, logprobs=True), request_id="7")
    run(model, request)
    payloads = request.sender.payloads()
    assert "".join(c["delta"].get("content", "") for p in payloads for c in p["choices"]) == " t0 t1 t2"
    assert payloads[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    assert [flags for _, flags in request.sender.responses].count(fakes.FINAL) == 1
    [(request_id, (prompt, params, lora))] = engine.requests.items()
    assert request_id.startswith("7-") and prompt["prompt"].endswith("assistant\n") and lora is None
    assert (params.output_kind.name, params.max_tokens, params.logprobs) == ("DELTA", 8, 0)
    streamed = [e for p in payloads for c in p["choices"] if c.get("logprobs") for e in c["logprobs"]["content"]]
    assert [e["token"] for e in streamed] == [" a"] * 3
    assert running(model) == 0


def test_a_whole_answer_is_the_engines_one_final_output(engine_model):
    engine = ScriptedEngine(pieces=4)
    model = engine_model(engine)
    request = fakes.Request(chat(n=2, seed=3))
    run(model, request)
    [completion] = request.sender.payloads()
    assert [c["message"]["content"] for c in completion["choices"]] == [" t0 t1 t2 t3"] * 2
    assert completion["usage"]["completion_tokens"] == 8
    params = [params for _, params, _ in engine.requests.values()]
    assert [p.output_kind.name for p in params] == ["FINAL_ONLY"] * 2
    assert sorted(p.seed for p in params) == [3, 4]


def test_the_completions_model_runs_on_its_own_engine_too(engine_model):
    model = engine_model(ScriptedEngine(pieces=2), model_class=OpenAICompletionsModel)
    request = fakes.Request(json.dumps({"prompt": "Say", "echo": True}))
    run(model, request)
    assert request.sender.payloads()[0]["choices"][0]["text"] == "Say t0 t1"


def test_a_client_that_goes_away_aborts_the_engine_request(engine_model):
    engine = ScriptedEngine(pieces=500, interval=0.005)
    model = engine_model(engine)
    request = fakes.Request(chat(stream=True, max_tokens=500), cancel_after=3)
    run(model, request)
    [error] = request.sender.errors()
    assert error.code() == fakes.TritonError.CANCELLED
    deadline = time.monotonic() + 2
    while (not engine.aborted or running(model)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.aborted == list(engine.requests)
    assert running(model) == 0 and not model._tasks  # the choice's reader ended too
    assert request.cancel_checks_after_final == 0
    follow = fakes.Request(chat())
    run(model, follow)  # and the engine keeps serving
    assert follow.sender.payloads()[0]["choices"][0]["finish_reason"] == "length"


def test_a_dead_engine_fails_open_and_new_requests_with_503_and_unloads_the_model(engine_model):
    engine = ScriptedEngine(pieces=1000, interval=0.01)
    model = engine_model(engine)
    streaming = fakes.Request(chat(stream=True, max_tokens=1000))
    model.execute([streaming])
    deadline = time.monotonic() + 5
    while len(streaming.sender.responses) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.die()
    assert streaming.sender.final.wait(5)
    later = fakes.Request(chat())
    run(model, later)
    for request in (streaming, later):
        [error] = request.sender.errors()
        assert error.code() == fakes.TritonError.UNAVAILABLE
        assert json.loads(error.message())["error"]["code"] == "service_unavailable"
    deadline = time.monotonic() + 2
    while not model.unloaded and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    assert model.unloaded == ["openai_chat"]  # once


@pytest.mark.parametrize("exit_code, unloaded", [(-9, ["openai_chat"]), (0, [])])
def test_only_an_engine_that_crashed_unloads_the_model(engine_model, exit_code, unloaded, caplog):
    """Killed (-9) or crashed: the model asks to be unloaded. Exited with 0 (its core was told to
    stop: Ctrl-C reaches every process of the terminal's group, the server is stopping too):
    requests get 503, and nothing asks Triton to unload (which crashes a stopping Triton 2.51)."""
    engine = ScriptedEngine()
    model = engine_model(engine)
    engine.die(exit_code)
    later = fakes.Request(chat())
    run(model, later)
    [error] = later.sender.errors()
    assert error.code() == fakes.TritonError.UNAVAILABLE
    time.sleep(0.5)
    assert model.unloaded == unloaded
    if not unloaded:
        assert "its vLLM engine was stopped" in caplog.text


def test_a_silent_death_is_noticed_without_requests(engine_model):
    engine = ScriptedEngine()
    model = engine_model(engine)
    engine.errored = True  # the engine core exited; nothing was reading
    deadline = time.monotonic() + 2
    while not model.unloaded and time.monotonic() < deadline:
        time.sleep(0.01)
    assert model.unloaded == ["openai_chat"]


def test_finalize_shuts_the_engine_down(engine_model):
    engine = ScriptedEngine()
    model = engine_model(engine)
    run(model, fakes.Request(chat()))
    model.finalize()
    assert engine.shut_down
    assert not model._loop_thread.is_alive()


def test_vllms_own_stat_logging_is_off_unless_model_json_asks_for_it():
    from tritonchat.transports.inprocess import engine_args

    assert engine_args({"model": "m"}) == {"model": "m", "disable_log_stats": True}
    assert engine_args({"model": "m", "disable_log_stats": False})["disable_log_stats"] is False


def test_the_running_gauge_is_set_once_for_many_changes_and_ends_at_the_true_count():
    from tritonchat.transports.inprocess import RUNNING_REPORT_S, InProcessTransport
    from tritonchat.engine.driver import EngineConfig

    transport = InProcessTransport(None, EngineConfig(Path("."), {"model": "m"}))
    reported = []
    transport.on_running = reported.append
    transport.engine = ScriptedEngine()

    async def churn():
        for i in range(50):
            transport.engine.collectors[f"r{i}"] = None
            transport.running_changed()
        for i in range(20):
            del transport.engine.collectors[f"r{i}"]
            transport.running_changed()
        await asyncio.sleep(RUNNING_REPORT_S * 3)

    asyncio.run(churn())
    assert reported == [30]
