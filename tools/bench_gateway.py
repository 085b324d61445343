"""What the OpenAI-compatible gateway adds: the same chat requests sent directly to
`openai_chat` (Triton's HTTP `generate_stream`) and through the gateway (`/v1/chat/completions`,
OpenAI server-sent events), in one run, against the scripted fixed-rate engine.

    .venv/bin/python tools/bench_gateway.py [--concurrency 1,16,64] [--repeats 3] [--max-tokens 64]

Starts a tritonserver (as tools/bench.py does, scripted pair only) and the gateway in its own
process, alternates direct and gateway runs (direct, gateway, then gateway, direct), and prints
a table: medians of the repeats with (min-max), and gateway vs direct as ratios (throughput)
and differences in ms (latency). Results also go to bench-results/<timestamp>-gateway.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.bench import BenchError, log  # noqa: E402
from harness.bench.cli import int_list, parse_args  # noqa: E402
from harness.bench.load import Target  # noqa: E402
from harness.bench.measure import paired_comparison, summarize_level  # noqa: E402
from harness.bench.paths import Renderer, build_targets, make_tiny_model  # noqa: E402
from harness.bench.report import fmt_latency_change, fmt_spread, git_revision, run_line  # noqa: E402
from harness.bench.runner import Bench  # noqa: E402
from harness.bench.servers import start_server, stop_server, wait_healthy  # noqa: E402
from harness.server import free_port  # noqa: E402


def start_gateway(server_http: str, chat_model: str, log_path: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log_file = open(log_path, "wb")  # noqa: SIM115  (closed with the process)
    process = subprocess.Popen(
        [sys.executable, "-m", "tritonchat.clients.gateway", "--port", str(port), "--http-url", server_http,
         "--chat-model", chat_model],
        stdout=log_file, stderr=subprocess.STDOUT, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"},
    )
    url = f"http://127.0.0.1:{port}"
    if wait_healthy(url, process, timeout=60, interval=0.2):
        return process, url
    process.kill()
    raise BenchError(f"the gateway did not start (log: {log_path})")


async def run(b: Bench, direct: Target, gateway: Target, args) -> list[dict]:
    runs = []
    async with b.session() as session:
        for target in (direct, gateway):  # warm-up
            await b.load(session, target, 4, 8)
        for concurrency in args.concurrency:
            total = b.requests_for(concurrency)
            for repeat in range(args.repeats):
                for target in (direct, gateway) if repeat % 2 == 0 else (gateway, direct):
                    result = await b.measure(session, target, concurrency, repeat, total)
                    runs.append(result)
                    log(f"[c={concurrency} #{repeat + 1} {target.side:7}] " + run_line(result))
                    await asyncio.sleep(args.pause)
    return runs


def report(runs: list[dict], args) -> tuple[str, list[dict]]:
    lines = [f"# Gateway vs direct generate_stream: {args.max_tokens} tokens per request, "
             f"scripted engine at {args.scripted_interval_ms:g} ms/token, medians of {args.repeats} runs (min-max)",
             "", "| conc | path | tokens/s | TTFT p50 ms | ITL p50 ms |", "|---|---|---|---|---|"]
    summary = []
    for concurrency in args.concurrency:
        level = {side: [r for r in runs if r["side"] == side and r["concurrency"] == concurrency]
                 for side in ("chat", "gateway")}
        if not level["chat"] or not level["gateway"]:
            continue
        stats = {side: summarize_level(level[side]) for side in level}
        cmp = paired_comparison([r["metrics"] for r in level["chat"]], [r["metrics"] for r in level["gateway"]])
        summary.append({"concurrency": concurrency, "direct": stats["chat"], "gateway": stats["gateway"],
                        "gateway_vs_direct": cmp})
        for side, name in (("chat", "direct"), ("gateway", "gateway")):
            s = stats[side]
            lines.append(f"| {concurrency} | {name} | {fmt_spread(s['tokens_per_s'])} | "
                         f"{fmt_spread(s['ttft_p50_ms'])} | {fmt_spread(s['itl_p50_ms'])} |")
        lines.append(f"| {concurrency} | **gateway/direct** | {fmt_spread(cmp['tokens_per_s_ratio'], 'x')} | "
                     f"{fmt_latency_change(cmp['ttft_p50_ms_diff'], cmp['ttft_p50_ms_ratio'])} | "
                     f"{fmt_latency_change(cmp['itl_p50_ms_diff'], cmp['itl_p50_ms_ratio'])} |")
    return "\n".join(lines) + "\n", summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int_list, default=[1, 16, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=0, help="per run (default: max(32, 4 x concurrency))")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--scripted-interval-ms", type=float, default=2.0)
    parser.add_argument("--out", type=Path)
    ours = parser.parse_args(argv)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = ours.out or ROOT / "bench-results" / f"{stamp}-gateway.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    args = parse_args([
        "--paths", "scripted", "--transports", "http", "--concurrency", ",".join(map(str, ours.concurrency)),
        "--repeats", str(ours.repeats), "--requests", str(ours.requests), "--max-tokens", str(ours.max_tokens),
        "--scripted-interval-ms", str(ours.scripted_interval_ms), "--out", str(out)])
    make_tiny_model(args.tokenizer)
    [(_, direct)] = build_targets(args, Renderer(args.tokenizer))  # raw, chat http
    direct.side = "chat"
    server, repo_dir = start_server(args, out)
    gateway_process = None
    try:
        server.wait_ready(timeout=600)
        gateway_process, gateway_url = start_gateway(server.http_url, args.chat_scripted_model,
                                                     out.with_name(out.stem + "-gateway.log"))
        chat_request = json.loads(direct.body["request"])
        gateway = Target("scripted", "gateway", args.chat_scripted_model, chat_request,
                         url=f"{gateway_url}/v1/chat/completions")
        b = Bench(f"http://{server.http_url}", args)
        runs = asyncio.run(run(b, direct, gateway, args))
    finally:
        if gateway_process is not None:
            gateway_process.terminate()
            gateway_process.wait(timeout=10)
        stop_server(server, repo_dir)
    table, summary = report(runs, args)
    out.write_text(json.dumps({"meta": {"git": git_revision(), "args": vars(ours) | {"out": str(out)}},
                               "summary": summary, "runs": runs}, indent=1, default=str))
    log(f"results: {out}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
