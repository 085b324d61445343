"""Benchmark `openai_chat` against the raw generation model it calls, in one run.

    python tools/bench.py [--concurrency 1,16,64,256] [--paths vllm,scripted] [--repeats 3]
        [--transports http,grpc,bls] [--stream-intervals 4] [--vllm-server] [--profile 'chat http@64']
        [--report docs/bench/bench] ...

Two groups of paths, each path doing the same work:
- `vllm`: `raw` = `vllm_model` (the tiny chat model on the local vLLM backend) called with the
  prompt `openai_chat` would render; `chat <transport>` = `openai_chat` in front of it, one per
  transport; `chat inprocess` = `openai_chat` with its own vLLM engine on the same engine
  settings (`engine: inprocess`, no second model; `--no-inprocess` leaves it out); with
  `--vllm-server`, `vllm serve` = vLLM's own OpenAI server on the same model with the same engine
  settings (its `/v1/chat/completions`, the same chat request);
- `scripted`: `raw` = `scripted_vllm` (a fake engine emitting one token every
  `--scripted-interval-ms`), `chat <transport>` = `openai_chat` in front of it. No engine
  competes for the CPU here, so this group isolates what the chat layer itself costs.
`--stream-intervals N` adds `chat <first transport> si=N`: the same chat request with vLLM's
`stream_interval: N` (chunks of at least N tokens after the first).

Triton paths stream over Triton's HTTP `generate_stream` (server-sent events), from a closed
loop of `concurrency` clients each sending its next request as soon as the previous one ends.
Every request produces exactly `--max-tokens` tokens (checked).

Per request: time to the first event carrying generated text (TTFT), gaps between
text-carrying events (ITL), how many such events (chunks) and tokens. `openai_chat`
merges outputs that are already waiting into one chunk when it falls behind, so it may
send fewer, larger chunks than the raw path: compare tokens/s as well as chunks/s.

Each (group, concurrency) runs `--repeats` times with the paths interleaved (in order, then
in reverse, ...) so drift hits every path alike; the report gives medians with their
min-max spread, ratios against raw (and against vLLM's server) of paired runs and the
project's targets. When this script starts the servers itself it also reports the CPU time
each server process used per token, and how busy other processes kept the machine (a shared
2-core machine makes every figure noisy). `--profile 'PATH@CONCURRENCY'` samples that path's
chat stub with py-spy during its first run there: the stage shares (receive, parse, build,
send, ...) go into the report, the stacks next to the JSON. Every per-run number goes to the
JSON file; `--report PREFIX` also writes PREFIX.md (the report) and PREFIX.png (output
tokens/s and first-token latency against concurrency, one line per path).

Any error response, wrong token count or stream silent for `--timeout` seconds fails the
run; for a silent stream the stacks of the stuck model's stub are saved next to the JSON.

By default a tritonserver is started on free ports with a temporary model repository;
`--url host:port` uses a running one instead (see the `--*-model` options for names; with
several transports the chat models are `<name>_<transport>`; the one with its own engine is
`<name>_inprocess`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from harness import ROOT
from harness.bench import BenchError, log
from harness.bench.measure import ProcessCpu, summarize
from harness.bench.paths import DEFAULT_TOKENIZER, VLLM_SERVE, Renderer, build_targets, make_tiny_model
from harness.bench.report import check_targets, git_revision, markdown_report, report_header, write_plot
from harness.bench.runner import Bench
from harness.bench.servers import start_server, start_vllm_server, stop_process_group, stop_server


def int_list(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("expected positive integers separated by commas")
    return values


def _paths(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    unknown = set(values) - {"vllm", "scripted"}
    if not values or unknown:
        raise argparse.ArgumentTypeError("expected vllm and/or scripted, separated by commas")
    return values


def _transports(text: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    unknown = set(values) - {"http", "grpc", "bls"}
    if not values or unknown or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError("expected http, grpc and/or bls, separated by commas")
    return values


def _variant(text: str) -> tuple[str, dict[str, str]]:
    from tritonchat.repository import parse_engine_arg  # noqa: PLC0415

    label, sep, rest = text.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_]+", label) or not rest:
        raise argparse.ArgumentTypeError("expected LABEL:key=value[,key=value...], e.g. 'lanes2:responder_threads=2'")
    return label, {key: str(value) for key, value in (parse_engine_arg(item) for item in rest.split(","))}


def _profile_spec(text: str) -> tuple[str, int]:
    side, sep, concurrency = text.rpartition("@")
    if not sep or not side or not concurrency.isdigit():
        raise argparse.ArgumentTypeError("expected PATH@CONCURRENCY, e.g. 'chat http@64'")
    return side, int(concurrency)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from tritonchat.repository import parse_engine_arg  # noqa: PLC0415

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=int_list, default=[1, 16, 64], help="levels, e.g. 1,16,64")
    p.add_argument("--requests", type=int, default=0, help="requests per run (default: max(32, 4 x concurrency))")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens every request generates")
    p.add_argument("--repeats", type=int, default=3, help="runs per (pair, concurrency, side)")
    p.add_argument("--paths", type=_paths, default=["vllm", "scripted"], help="pairs to run: vllm,scripted")
    p.add_argument("--scripted-interval-ms", type=float, default=2.0, help="the fake engine's time per token")
    p.add_argument("--instances", type=int, default=1, help="instance_group count of the chat models")
    p.add_argument("--bls-instances", type=int, default=0,
                   help="instance_group count of the chat models on the BLS transport (default: --instances); "
                        "BLS reads one stream at a time per instance")
    p.add_argument("--transports", "--transport", type=_transports, default=["http"],
                   help="how the chat models read the generation stream (parameter 'transport'): one chat "
                        "path per transport, e.g. http,grpc,bls")
    p.add_argument("--stream-intervals", type=int_list, default=[],
                   help="extra chat paths over the first transport whose requests set 'stream_interval', e.g. 4,16")
    p.add_argument("--variant", action="append", default=[], type=_variant,
                   help="an extra chat path over the first transport whose model has these config parameters, "
                        "LABEL:key=value[,key=value...], e.g. 'lanes2:responder_threads=2' (repeatable)")
    p.add_argument("--inprocess", action=argparse.BooleanOptionalAction, default=True,
                   help="on the vllm pair, also 'chat inprocess': the chat model with its own vLLM engine on the "
                        "same engine settings (engine: inprocess)")
    p.add_argument("--vllm-server", nargs="?", const="start", default=None,
                   help="add vLLM's own OpenAI server on the tiny model as a path of the vllm pair: started "
                        "here, or the URL of a running one (http://host:port)")
    p.add_argument("--profile", action="append", default=[], type=_profile_spec,
                   help="sample the chat stub with py-spy during the first run of 'PATH@CONCURRENCY', e.g. "
                        "'chat http@64' (repeatable); stage shares go into the report")
    p.add_argument("--report", type=Path,
                   help="also write the report to REPORT.md and the plot to REPORT.png (e.g. docs/bench/bench)")
    p.add_argument("--chat-parameter", action="append", default=[], type=parse_engine_arg,
                   help="config parameter key=value of the chat models (e.g. responder_threads=1)")
    p.add_argument("--engine-arg", action="append", default=[], type=parse_engine_arg,
                   help="extra vLLM engine argument key=value for vllm_model (e.g. stream_interval=4)")
    p.add_argument("--out", type=Path, help="JSON results (default: bench-results/<timestamp>.json)")
    p.add_argument("--url", help="host:port of a running server's HTTP endpoint (default: start one)")
    p.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER,
                   help="tokenizer and chat template the chat model uses (renders the raw prompt)")
    p.add_argument("--chat-model", default="openai_chat")
    p.add_argument("--raw-model", default="vllm_model")
    p.add_argument("--chat-scripted-model", default="chat_scripted")
    p.add_argument("--raw-scripted-model", default="scripted_vllm")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a stream may stay silent before the run fails")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs")
    args = p.parse_args(argv)
    if args.out is None:
        args.out = ROOT / "bench-results" / f"{datetime.now():%Y%m%d-%H%M%S}.json"
    args.tokenizer = args.tokenizer.resolve()
    return args


def write_results(args, pairs, bench: Bench, summary, checks, *, started: str, status: str, server_log) -> None:
    result = {
        "meta": {
            "started": started,
            "status": status,
            "git": git_revision(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "server": args.url or "local tritonserver",
            "server_log": str(server_log) if server_log else None,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "targets": {f"{t.pair}/{t.side}": asdict(t) for group in pairs for t in group},
        },
        "summary": summary,
        "targets": checks,
        "profiles": bench.profiles,
        "runs": bench.runs,
    }
    args.out.write_text(json.dumps(result, indent=1))
    log(f"results: {args.out}")


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """tools/bench.py: 0 when every run went through, 1 when the benchmark failed (the results
    of the runs that finished are written all the same)."""
    try:
        return run(parse_args(argv))
    except BenchError as error:
        log(f"benchmark failed: {error}")
        return 1


def run(args: argparse.Namespace) -> int:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    make_tiny_model(args.tokenizer)
    pairs = build_targets(args, Renderer(args.tokenizer))

    # `kill` (SIGTERM) ends the benchmark like Ctrl-C does: the server is stopped, results written.
    signal.signal(signal.SIGTERM, _terminate)
    server = repo_dir = vllm_server = None
    bench = Bench(f"http://{args.url}", args)
    started = datetime.now().isoformat(timespec="seconds")
    status = "ok"
    try:
        if args.vllm_server == "start" and "vllm" in args.paths:
            vllm_server, url = start_vllm_server(args, args.out)
            for target in (t for group in pairs for t in group if t.side == VLLM_SERVE):
                target.url = f"{url}/v1/chat/completions"
            bench.other_cpu.append(ProcessCpu(vllm_server.pid, VLLM_SERVE))
        if not args.url:
            server, repo_dir = start_server(args, args.out)
            server.wait_ready(timeout=600)
            bench.base_url = f"http://{server.http_url}"
            bench.cpu = ProcessCpu(server.process.pid)
            bench.metrics_url = f"http://127.0.0.1:{server.metrics_port}/metrics"
            log(f"tritonserver ready at {server.http_url}")
        asyncio.run(bench.run(pairs))
    except BaseException as exc:
        status = f"failed: {exc}"
        raise
    finally:
        if server:
            stop_server(server, repo_dir)
        if vllm_server:
            stop_process_group(vllm_server)
        summary = summarize(bench.runs, args)
        checks = check_targets(summary)
        write_results(args, pairs, bench, summary, checks, started=started, status=status,
                      server_log=server.log_path if server else None)
        if bench.runs:
            plot = None
            if args.report and summary:
                args.report.parent.mkdir(parents=True, exist_ok=True)
                plot_path = args.report.with_suffix(".png")
                write_plot(summary, args, plot_path)
                plot = plot_path.name
            report = markdown_report(summary, checks, args, bench.profiles, plot)
            if status != "ok":
                report = f"**Incomplete: {status}** (the table shows the runs that finished)\n\n" + report
            if args.report:
                args.report.with_suffix(".md").write_text(report_header(args, started) + report)
                log(f"report: {args.report.with_suffix('.md')}")
            print(report)
    return 0
