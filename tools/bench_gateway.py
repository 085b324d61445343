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
import time
import urllib.request
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import bench  # noqa: E402
from tools.tritonlocal import free_port  # noqa: E402


def start_gateway(server_http: str, chat_model: str, log_path: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = open(log_path, "wb")  # noqa: SIM115  (closed with the process)
    process = subprocess.Popen(
        [sys.executable, "-m", "tritonchat.gateway", "--port", str(port), "--http-url", server_http,
         "--chat-model", chat_model],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise bench.BenchError(f"the gateway did not start (log: {log_path})")


async def run(b: bench.Bench, direct: bench.Target, gateway: bench.Target, args) -> list[dict]:
    import aiohttp  # noqa: PLC0415

    limit = max(args.concurrency) + 8
    runs = []
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=args.timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for target in (direct, gateway):  # warm-up
            await b.load(session, target, 4, 8)
        for concurrency in args.concurrency:
            total = b.requests_for(concurrency)
            for repeat in range(args.repeats):
                for target in (direct, gateway) if repeat % 2 == 0 else (gateway, direct):
                    result = await b.measure(session, target, concurrency, repeat, total)
                    runs.append(result)
                    bench.log(f"[c={concurrency} #{repeat + 1} {target.side:7}] " + bench.run_line(result))
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
        stats = {side: bench.summarize_level(level[side]) for side in level}
        cmp = bench.paired_comparison([r["metrics"] for r in level["chat"]], [r["metrics"] for r in level["gateway"]])
        summary.append({"concurrency": concurrency, "direct": stats["chat"], "gateway": stats["gateway"],
                        "gateway_vs_direct": cmp})
        for side, name in (("chat", "direct"), ("gateway", "gateway")):
            s = stats[side]
            lines.append(f"| {concurrency} | {name} | {bench.fmt_spread(s['tokens_per_s'])} | "
                         f"{bench.fmt_spread(s['ttft_p50_ms'])} | {bench.fmt_spread(s['itl_p50_ms'])} |")
        lines.append(f"| {concurrency} | **gateway/direct** | {bench.fmt_spread(cmp['tokens_per_s_ratio'], 'x')} | "
                     f"{bench.fmt_latency_change(cmp['ttft_p50_ms_diff'], cmp['ttft_p50_ms_ratio'])} | "
                     f"{bench.fmt_latency_change(cmp['itl_p50_ms_diff'], cmp['itl_p50_ms_ratio'])} |")
    return "\n".join(lines) + "\n", summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=bench._int_list, default=[1, 16, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=0, help="per run (default: max(32, 4 x concurrency))")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--scripted-interval-ms", type=float, default=2.0)
    parser.add_argument("--out", type=Path)
    ours = parser.parse_args(argv)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = ours.out or ROOT / "bench-results" / f"{stamp}-gateway.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    args = bench.parse_args([
        "--paths", "scripted", "--transports", "http", "--concurrency", ",".join(map(str, ours.concurrency)),
        "--repeats", str(ours.repeats), "--requests", str(ours.requests), "--max-tokens", str(ours.max_tokens),
        "--scripted-interval-ms", str(ours.scripted_interval_ms), "--out", str(out)])
    if args.tokenizer == bench.DEFAULT_TOKENIZER.resolve():
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_model.py"), "--out", str(args.tokenizer)],
                       check=True, stdout=sys.stderr)
    [(_, direct)] = bench.build_targets(args, bench.Renderer(args.tokenizer))  # raw, chat http
    direct.side = "chat"
    server, repo_dir = bench.start_server(args, out)
    gateway_process = None
    try:
        server.wait_ready(timeout=600)
        gateway_process, gateway_url = start_gateway(server.http_url, args.chat_scripted_model,
                                                     out.with_name(out.stem + "-gateway.log"))
        chat_request = json.loads(direct.body["request"])
        gateway = bench.Target("scripted", "gateway", args.chat_scripted_model, chat_request,
                               url=f"{gateway_url}/v1/chat/completions")
        b = bench.Bench(f"http://{server.http_url}", args)
        runs = asyncio.run(run(b, direct, gateway, args))
    finally:
        if gateway_process is not None:
            gateway_process.terminate()
            gateway_process.wait(timeout=10)
        bench.stop_server(server, repo_dir)
    table, summary = report(runs, args)
    out.write_text(json.dumps({"meta": {"git": bench.git_revision(), "args": vars(ours) | {"out": str(out)}},
                               "summary": summary, "runs": runs}, indent=1, default=str))
    bench.log(f"results: {out}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
