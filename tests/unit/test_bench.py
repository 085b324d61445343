"""The pure helpers of the benchmark (harness/bench): statistics, event parsing, request bodies, report."""

from __future__ import annotations

import argparse
import json

import pytest

from harness.bench import BenchError
from harness.bench.cli import parse_args
from harness.bench.load import RequestResult, parse_chat_event, parse_raw_event
from harness.bench.measure import RESULT_KEYS, paired_comparison, percentile, spread, summarize, summarize_run
from harness.bench.paths import INPROCESS, VLLM_SERVE, build_targets, chat_request, raw_body, scripted_content
from harness.bench.profile import profile_report, read_collapsed, stage_shares
from harness.bench.report import check_targets, markdown_report, run_line, write_plot
from harness.bench.servers import build_repository, set_instance_count, vllm_server_command


def test_percentile_interpolates_between_ranks():
    assert percentile([], 50) is None
    assert percentile([7], 99) == 7
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([4, 1, 3, 2], 0) == 1
    assert percentile([4, 1, 3, 2], 100) == 4
    assert percentile(range(101), 99) == 99
    assert percentile([0, 10], 99) == pytest.approx(9.9)
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_request_result_latencies():
    r = RequestResult(start=10.0, end=10.5, text_times=[10.1, 10.2, 10.4], tokens=5)
    assert r.ttft == pytest.approx(0.1)
    assert r.gaps == pytest.approx([0.1, 0.2])
    assert r.tpot == pytest.approx(0.3 / 4)
    assert RequestResult(start=0, end=1).ttft is None
    assert RequestResult(start=0, end=1, text_times=[0.5], tokens=3).tpot is None


def test_summarize_run_counts_chunks_tokens_and_rates():
    results = [
        RequestResult(start=0.0, end=1.0, first_event=0.05, text_times=[0.1, 0.2, 0.3], tokens=3),
        RequestResult(start=0.0, end=1.0, first_event=0.05, text_times=[0.3, 0.5], tokens=3),  # one merged chunk
    ]
    m = summarize_run(results, wall_s=2.0)
    assert (m["requests"], m["chunks"], m["tokens"]) == (2, 5, 6)
    assert m["chunks_per_s"] == 2.5 and m["tokens_per_s"] == 3.0 and m["requests_per_s"] == 1.0
    assert m["tokens_per_chunk"] == pytest.approx(1.2)
    assert m["ttft_p50_ms"] == pytest.approx(200.0)
    assert m["first_event_p50_ms"] == pytest.approx(50.0)  # e.g. the chat role chunk, before any text
    assert m["itl_p50_ms"] == pytest.approx(100.0)  # gaps 0.1, 0.1, 0.2
    assert m["itl_p99_ms"] == pytest.approx(198.0)
    assert set(RESULT_KEYS) <= set(m)


def test_spread_ignores_missing_values():
    assert spread([]) is None
    assert spread([None]) is None
    assert spread([3, None, 1, 2]) == {"median": 2, "min": 1, "max": 3, "n": 3}


def _metrics(**values):
    base = {key: 1.0 for key in RESULT_KEYS}
    return {**base, **values}


def test_paired_comparison_pairs_runs_by_repeat():
    raw = [_metrics(chunks_per_s=100, ttft_p50_ms=2.0), _metrics(chunks_per_s=200, ttft_p50_ms=4.0)]
    chat = [_metrics(chunks_per_s=90, ttft_p50_ms=3.0), _metrics(chunks_per_s=100, ttft_p50_ms=8.0)]
    cmp = paired_comparison(raw, chat)
    assert cmp["chunks_per_s_ratio"] == {"median": pytest.approx(0.7), "min": 0.5, "max": 0.9, "n": 2}
    assert cmp["ttft_p50_ms_diff"]["median"] == pytest.approx(2.5)
    assert cmp["ttft_p50_ms_ratio"]["max"] == pytest.approx(2.0)
    missing = paired_comparison([_metrics(itl_p50_ms=None)], [_metrics()])
    assert missing["itl_p50_ms_diff"] is None


def test_parse_raw_event_reads_scalars_and_lists():
    e = parse_raw_event({"model_name": "m", "text_output": "ab", "num_output_tokens": [2], "num_input_tokens": 7})
    assert (e.text, e.tokens, e.prompt_tokens) == ("ab", 2, 7)
    assert parse_raw_event({"text_output": ""}).text == ""
    with pytest.raises(BenchError, match="boom"):
        parse_raw_event({"error": "boom"})


def test_parse_chat_event_text_and_usage():
    def event(chunk):
        return {"model_name": "openai_chat", "response": json.dumps(chunk)}

    role = parse_chat_event(event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
    assert role.text == "" and role.tokens is None
    text = parse_chat_event(event({"choices": [{"index": 0, "delta": {"content": "hi"}}], "usage": None}))
    assert text.text == "hi"
    usage = parse_chat_event(event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 64}}))
    assert (usage.text, usage.tokens, usage.prompt_tokens) == ("", 64, 5)
    with pytest.raises(BenchError):
        parse_chat_event({"error": "{\"error\": {}}"})


def test_bodies_ask_for_the_same_generation():
    chat = chat_request("hello", 64)
    assert chat["max_completion_tokens"] == 64 and chat["ignore_eos"] and chat["stream"]
    raw = raw_body("<prompt>", 64)
    assert json.loads(raw["sampling_parameters"]) == {"max_tokens": 64, "temperature": 0, "ignore_eos": True}
    assert raw["stream"] and raw["exclude_input_in_output"] and raw["return_num_output_tokens"]
    script = scripted_content(8, 2)
    assert json.loads(script.removeprefix("SCRIPT:")) == {"repeat": {"text": "tok ", "count": 8}, "interval_ms": 2}


def test_set_instance_count(tmp_path):
    config = tmp_path / "config.pbtxt"
    config.write_text('backend: "python"\n# count: 9 in a comment before\ninstance_group [ { count: 1, kind: KIND_CPU } ]\n')
    set_instance_count(config, 3)
    assert "instance_group [ { count: 3, kind: KIND_CPU } ]" in config.read_text()
    assert "count: 9 in a comment" in config.read_text()


def test_report_has_ratio_rows_and_targets(tmp_path):
    args = argparse.Namespace(
        paths=["scripted", "vllm"], concurrency=[1, 16, 64], max_tokens=64, repeats=2, scripted_interval_ms=2.0,
        chat_scripted_model="chat_scripted", raw_scripted_model="scripted_vllm", raw_model="vllm_model",
    )
    runs = []
    sides = {"scripted": (("raw", "scripted_vllm", 1000.0, 2.0), ("chat http", "chat_scripted_http", 900.0, 4.0),
                          ("chat bls", "chat_scripted_bls", 500.0, 30.0)),
             "vllm": (("raw", "vllm_model", 1000.0, 2.0), ("chat http", "openai_chat_http", 900.0, 4.0),
                      (VLLM_SERVE, "tiny-chat", 800.0, 3.0))}
    for pair, paths in sides.items():
        for concurrency in (1, 16, 64):
            for repeat in range(2):
                for side, model, rate, ttft in paths:
                    runs.append({
                        "pair": pair, "side": side, "model": model, "concurrency": concurrency, "repeat": repeat,
                        "metrics": _metrics(tokens_per_s=rate, ttft_p50_ms=ttft, itl_p50_ms=rate / 500, tokens=640),
                        "client_cpu_s": 0.1, "other_processes_cores": 0.0,
                        "server_cpu_s": {"tritonserver": 0.05, "chat_scripted_http": 0.032, "chat_scripted_bls": 0.2},
                    })
    summary = summarize(runs, args)
    assert [e["sides"].keys() for e in summary][0] == {"raw", "chat http", "chat bls"}
    checks = check_targets(summary)
    by_name = {(c["pair"], c["side"], c["what"]): c["ok"] for c in checks}
    assert by_name[("scripted", "chat http", "added TTFT p50 at concurrency 1 <= 1.5 ms")] is False  # +2 ms
    assert by_name[("scripted", "chat http", "tokens/s vs raw at concurrency 16 >= 0.85x")] is True
    assert by_name[("scripted", "chat bls", "tokens/s vs raw at concurrency 64 >= 0.85x")] is False
    assert by_name[("scripted", "chat http", "ITL p50 vs raw at concurrency 16 <= 1.3x")] is True
    assert by_name[("scripted", "chat http", "stub CPU per token at concurrency 64 <= 80 µs")] is True  # 50 µs
    assert by_name[("scripted", "chat bls", "stub CPU per token at concurrency 64 <= 80 µs")] is False
    assert by_name[("vllm", "chat http", "tokens/s vs vLLM's own server at concurrency 64 >= 1.0x")] is True
    assert not any(pair == "vllm" and "raw" in what for pair, _, what in by_name)  # the raw targets: scripted only
    profiles = [{"pair": "scripted", "side": "chat http", "model": "chat_scripted_http", "concurrency": 64,
                 "samples": 100, "stages": {"send": 0.5, "receive": 0.25, "other": 0.25}}]
    report = markdown_report(summary, checks, args, profiles, "bench.png")
    assert "| 16 | **chat http / raw** |" in report and "0.90x" in report and "+2.00 (2.00x)" in report
    assert f"| 64 | **chat http / {VLLM_SERVE}** |" in report and "1.12x" in report
    assert "![tokens/s and first-token latency against concurrency](bench.png)" in report
    assert "| scripted | chat http | 64 | 100 | 50% (25 µs) | 0% (0 µs) |" in report  # send: half of 50 µs
    assert "PASS" in report and "FAIL" in report
    write_plot(summary, args, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_stages_come_from_the_innermost_matching_rule():
    collapsed = (
        "_run (threading.py:1);_handle (tritonchat/sender.py:2);send (tritonchat/triton/sink.py:3) 6\n"
        "_run (threading.py:1);_handle (tritonchat/sender.py:2);stream_output (tritonchat/chunks.py:4) 2\n"
        "run_forever (asyncio/base_events.py:5);__aiter__ (tritonchat/transports/http.py:6) 1\n"
        "run_forever (asyncio/base_events.py:5);pump (tritonchat/transports/base.py:7);"
        "decode (tritonchat/formats/vllm.py:8) 1\n"
        "garbage line\n"
    )
    samples = read_collapsed(collapsed)
    assert sum(samples.values()) == 10
    assert stage_shares(samples) == {"send": 0.6, "build": 0.2, "receive": 0.1, "parse": 0.1}
    report = profile_report(samples, stage_shares(samples), "m")
    assert "60.0%  send (tritonchat/triton/sink.py)" in report


def test_build_targets_one_path_per_transport_and_interval():
    args = parse_args(["--paths", "scripted,vllm", "--transports", "http,bls", "--stream-intervals", "4",
                             "--vllm-server", "--out", "/tmp/x.json"])
    groups = build_targets(args, lambda request: "<prompt>")
    scripted, vllm = ([t.side for t in group] for group in groups)
    assert scripted == ["raw", "chat http", "chat bls", "chat http si=4"]
    assert vllm == ["raw", "chat http", "chat bls", "chat http si=4", INPROCESS, VLLM_SERVE]
    assert groups[1][-2].model == "openai_chat_inprocess" and groups[1][-2].body == groups[1][1].body
    assert [t.model for t in groups[0]] == ["scripted_vllm", "chat_scripted_http", "chat_scripted_bls",
                                            "chat_scripted_http"]
    assert json.loads(groups[0][3].body["request"])["stream_interval"] == 4
    serve = groups[1][-1]
    assert serve.kind == "openai" and serve.body["model"] == "tiny-chat" and serve.body["stream"] is True
    assert parse_args(["--profile", "chat http@64", "--out", "/tmp/x.json"]).profile == [("chat http", 64)]


def test_a_variant_is_a_chat_model_of_its_own_with_its_parameters(tmp_path, monkeypatch):
    args = parse_args(["--paths", "scripted", "--transports", "grpc,http", "--variant",
                             "lanes1:responder_threads=1,metrics=false", "--out", "/tmp/x.json"])
    assert args.variant == [("lanes1", {"responder_threads": "1", "metrics": "False"})]
    [group] = build_targets(args, lambda request: "<prompt>")
    assert [(t.side, t.model) for t in group][-1] == ("chat grpc lanes1", "chat_scripted_grpc_lanes1")
    made = {}

    def add_chat_model(repo, name, **parameters):
        made[name] = parameters
        (repo / name).mkdir()
        (repo / name / "config.pbtxt").write_text("instance_group [ { count: 1 } ]")
        return repo / name

    monkeypatch.setattr("harness.repositories.add_chat_model", add_chat_model)
    monkeypatch.setattr("harness.repositories.add_test_model", lambda *a, **k: None)
    build_repository(tmp_path, args, 1, 2)
    assert made["chat_scripted_grpc_lanes1"]["responder_threads"] == "1"
    assert made["chat_scripted_grpc_lanes1"]["transport"] == "grpc"
    assert "responder_threads" not in made["chat_scripted_grpc"]
    for bad in ("nolabel", "bad label:x=1", "label:"):
        with pytest.raises(SystemExit):
            parse_args(["--variant", bad, "--out", "/tmp/x.json"])


def test_the_inprocess_path_has_its_own_engine_on_the_raw_models_settings(tmp_path, monkeypatch):
    args = parse_args(["--paths", "vllm", "--engine-arg", "max_num_seqs=8", "--out", "/tmp/x.json"])
    made = {}

    def add(kind):
        def add_model(repo, name, *positional, **parameters):
            made[name] = (kind, parameters)
            (repo / name).mkdir()
            (repo / name / "config.pbtxt").write_text("instance_group [ { count: 1 } ]")
            return repo / name
        return add_model

    for kind in ("add_chat_model", "add_inprocess_chat_model", "add_vllm_model"):
        monkeypatch.setattr(f"harness.repositories.{kind}", add(kind))
    build_repository(tmp_path, args, 1, 2)
    kind, parameters = made["openai_chat_inprocess"]
    assert kind == "add_inprocess_chat_model" and parameters["engine_args"] == {"max_num_seqs": 8}
    assert made["vllm_model"][1] == {"max_num_seqs": 8}
    assert [t.side for t in build_targets(parse_args(["--paths", "vllm", "--no-inprocess", "--out", "/tmp/x.json"]),
                                          lambda request: "<prompt>")[0]] == ["raw", "chat http"]


def test_the_inprocess_targets_compare_with_raw_and_vllms_own_server():
    args = argparse.Namespace(paths=["vllm"], concurrency=[1, 64], repeats=1)
    runs = []
    for concurrency in (1, 64):
        for side, model, rate, ttft, cpu in (("raw", "vllm_model", 1000.0, 100.0, {"vllm_model children": 0.3}),
                                             (INPROCESS, "openai_chat_inprocess", 1100.0, 103.0,
                                              {"openai_chat_inprocess": 0.1, "openai_chat_inprocess children": 0.2}),
                                             (VLLM_SERVE, "tiny-chat", 1150.0, 100.5, {VLLM_SERVE: 0.3})):
            runs.append({"pair": "vllm", "side": side, "model": model, "concurrency": concurrency, "repeat": 0,
                         "metrics": _metrics(tokens_per_s=rate, ttft_p50_ms=ttft, tokens=1000), "client_cpu_s": 0.1,
                         "other_processes_cores": 0.0, "server_cpu_s": {"tritonserver": 0.1, **cpu}})
    checks = {c["what"]: (c["ok"], round(c["value"], 3)) for c in check_targets(summarize(runs, args))
              if c["side"] == INPROCESS}
    assert checks == {
        "tokens/s vs raw at concurrency 64 >= 1.0x": (True, 1.1),
        "tokens/s vs vLLM's own server at concurrency 64 >= 0.9x": (True, 0.957),
        "TTFT p50 vs vLLM's own server at concurrency 1 <= +2 ms": (False, 2.5),
        # tritonserver 100 + stub 100 + engine 200 µs per token against vLLM's 300 µs
        "server CPU per token vs vLLM's own server at concurrency 64 <= 1.2x": (False, 1.333),
    }


def test_vllm_server_gets_the_engine_settings_of_vllm_model():
    args = parse_args(["--engine-arg", "stream_interval=4", "--out", "/tmp/x.json"])
    command = vllm_server_command(args, 1234)
    assert command[command.index("--stream-interval") + 1] == "4"
    assert "--enforce-eager" in command and command[command.index("--dtype") + 1] == "float32"
    assert command[command.index("--served-model-name") + 1] == "tiny-chat"


def test_run_line_tolerates_missing_figures():
    run = {"metrics": {**_metrics(itl_p50_ms=None), "wall_s": 2.0}, "other_processes_cores": 0.25}
    line = run_line(run)
    assert "ITL p50 - ms" in line and "(other processes: 0.25 cores)" in line


@pytest.mark.parametrize(("transport", "parsers"), [("grpc", False), ("http", True)])
def test_the_token_path_micro_benchmark_runs_the_real_per_token_code(tiny_model, transport, parsers):
    """harness/bench/token_path.py: every stage measured, and the chunks it built are the stream
    a client would get (its figures are for reading, not asserted)."""
    from harness.bench import token_path  # noqa: PLC0415

    summary = token_path.run(30, 1, transport, parsers, tiny_model)
    assert set(summary) == {"receive", "parse", "build", "send", "total"}
    assert all(value["median"] > 0 for value in summary.values())
    assert summary["total"]["median"] == pytest.approx(sum(summary[s]["median"] for s in token_path.STAGES))


def test_the_token_path_micro_benchmark_streams_what_a_client_reads(tiny_model):
    from harness.bench import token_path  # noqa: PLC0415
    from tritonchat.triton import sink as sink_module  # noqa: PLC0415

    sent = []

    class Sender:
        def send(self, response, flags=0):
            sent.append(json.loads(response.output_tensors[0].array[0]))

    real = sink_module.pb
    service = token_path.make_service(tiny_model, parsers=False)
    prepared = service.prepare(json.dumps({"messages": [{"role": "user", "content": "Hi"}], "stream": True,
                                           "max_tokens": 12}), "x")
    sink = token_path.make_sink(Sender())
    wire, receive = token_path.make_receive("grpc", token_path.backend_outputs(12))
    for raw in wire:
        for payload in prepared.builder.stream_output(0, prepared.decoders[0].decode(receive(raw))):
            sink.send(payload, final=False)
    for payload in prepared.builder.stream_finish(0):
        sink.send(payload, final=False)
    assert sink_module.pb is real  # the fake utilities stay with this sink
    text = "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in sent)
    assert text == "".join(token_path.WORDS[i % len(token_path.WORDS)] for i in range(12))
    assert sent[-1]["choices"][0]["finish_reason"] == "length"


def test_first_token_stages_are_read_from_the_metrics_and_reported():
    """The chat models' `tritonchat_first_token_stage_seconds` scraped before and after a run
    give each stage's mean over the run; the report breaks the first token down at concurrency 1."""
    from harness.bench.measure import stage_means_ms

    def scrape(count, sums):
        return {("chat_http", stage): (total, count) for stage, total in zip(("prepare", "wait", "handoff", "send"), sums)}

    before = scrape(2, (0.002, 0.010, 0.0002, 0.0004))
    after = scrape(6, (0.010, 0.050, 0.0006, 0.0012))
    means = stage_means_ms(before, after, "chat_http")
    assert {k: round(v, 3) for k, v in means.items()} == {"prepare": 2.0, "wait": 10.0, "handoff": 0.1, "send": 0.2}
    assert stage_means_ms(after, after, "chat_http") is None  # no request in between

    args = argparse.Namespace(paths=["scripted"], concurrency=[1], max_tokens=64, repeats=2, scripted_interval_ms=2.0,
                              chat_scripted_model="chat_scripted", raw_scripted_model="scripted_vllm",
                              raw_model="vllm_model")
    runs = []
    for repeat in range(2):
        for side, model, ttft in (("raw", "scripted_vllm", 9.0), ("chat http", "chat_http", 12.0)):
            runs.append({"pair": "scripted", "side": side, "model": model, "concurrency": 1, "repeat": repeat,
                         "metrics": _metrics(tokens_per_s=500.0, ttft_p50_ms=ttft, itl_p50_ms=2.0, tokens=640),
                         "client_cpu_s": 0.1, "other_processes_cores": 0.0, "server_cpu_s": None,
                         "ttft_mean_ms": ttft,
                         "first_token_stages_ms": means if side != "raw" else None})
    report = markdown_report(summarize(runs, args), [], args)
    assert ("| scripted | chat http | 2.00 (2.00-2.00) | 10.0 (10.0-10.0) | +1.00 | 0.10 (0.10-0.10) | "
            "0.20 (0.20-0.20) | +3.00 |") in report, report


def test_the_stage_metric_is_parsed_from_prometheus_text(monkeypatch):
    from harness.bench import measure

    text = (
        '# TYPE tritonchat_first_token_stage_seconds histogram\n'
        'tritonchat_first_token_stage_seconds_count{model="chat_http",stage="wait"} 4\n'
        'tritonchat_first_token_stage_seconds_sum{model="chat_http",stage="wait"} 0.04\n'
        'tritonchat_first_token_stage_seconds_bucket{model="chat_http",stage="wait",le="0.001"} 0\n'
        'tritonchat_time_to_first_token_seconds_sum{model="chat_http"} 9\n'
    )

    class Response:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            return text.encode()

    monkeypatch.setattr("urllib.request.urlopen", lambda url, timeout: Response())
    assert measure.scrape_stages("http://x/metrics") == {("chat_http", "wait"): (0.04, 4.0)}
