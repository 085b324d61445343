"""Whole (non-streamed) answers: should `openai_chat` ask the vLLM backend for one response or a stream?

    .venv/bin/python tools/bench_whole.py [--concurrency 1,16,64] [--rounds 3] [--max-tokens 64]

NVIDIA's vLLM backend answers a non-streamed request from its event loop and checks for
cancellation after every engine output with a blocking call on that loop; a streamed request is
sent from its response thread instead (harness/local_vllm_backend follows it in both). This runs
one server with the tiny model on the CPU vLLM engine and two chat models in front of it, `one`
(the default: `stream: false` to the backend) and `streamed` (`vllm_stream_whole`: a stream,
assembled by `openai_chat`), and sends both the same non-streamed chat requests, in alternating
rounds, at each concurrency. It prints requests/s, latency percentiles and the server's CPU per
request (per process: tritonserver, each model's stub, the engine), medians over the rounds with
their ranges, and the ratio streamed / one; `--json` writes them too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.bench.measure import ProcessCpu, cpu_delta, percentile  # noqa: E402
from harness.repositories import add_chat_model, add_vllm_model  # noqa: E402
from harness.serve import TINY_MODEL  # noqa: E402
from harness.server import TritonServer, free_port  # noqa: E402

PATHS = {"one": {}, "streamed": {"vllm_stream_whole": "true"}}


async def run(url: str, model: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    import aiohttp  # noqa: PLC0415

    body = json.dumps({"request": json.dumps({
        "messages": [{"role": "user", "content": "Tell me a long story about the river."}],
        "max_completion_tokens": max_tokens, "ignore_eos": True, "temperature": 0})}).encode()
    latencies: list[float] = []
    failures = 0
    queue = list(range(requests))

    async def worker(session) -> None:
        nonlocal failures
        while queue:
            queue.pop()
            started = time.monotonic()
            async with session.post(f"http://{url}/v2/models/{model}/generate", data=body) as response:
                data = await response.json()
            if response.status != 200 or "error" in data:
                failures += 1
                continue
            usage = json.loads(data["response"])["usage"]
            if usage["completion_tokens"] != max_tokens:
                failures += 1
            latencies.append(time.monotonic() - started)

    started = time.monotonic()
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    wall = time.monotonic() - started
    return {"requests_per_s": len(latencies) / wall, "p50_ms": percentile(latencies, 50) * 1000,
            "p90_ms": percentile(latencies, 90) * 1000, "failures": failures}


def median_range(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=0, help="per run (default: max(16, 4 x concurrency))")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]

    repo = Path(tempfile.mkdtemp(prefix="bench-whole-")) / "repository"
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    add_vllm_model(repo, "vllm_model", TINY_MODEL)
    for name, parameters in PATHS.items():
        add_chat_model(repo, name, http_url=f"127.0.0.1:{http_port}", **parameters)
    results: dict = {}
    with TritonServer(repo, http_port, grpc_port, metrics_port, log_path=repo.parent / "server.log") as server:
        cpu = ProcessCpu(server.process.pid)
        asyncio.run(run(server.http_url, "one", 4, 8, args.max_tokens))  # warm up both paths
        asyncio.run(run(server.http_url, "streamed", 4, 8, args.max_tokens))
        for level in levels:
            count = args.requests or max(16, 4 * level)
            for round_ in range(args.rounds):
                order = list(PATHS) if round_ % 2 == 0 else list(reversed(PATHS))
                for path in order:
                    before = cpu.snapshot()
                    measured = asyncio.run(run(server.http_url, path, level, count, args.max_tokens))
                    used = cpu_delta(before, cpu.snapshot())
                    measured["cpu_ms_per_request"] = {role: round(1000 * seconds / count, 2)
                                                      for role, seconds in used.items() if seconds > 0}
                    results.setdefault(level, {}).setdefault(path, []).append(measured)
                    print(f"c={level} round {round_} {path}: {measured['requests_per_s']:.1f} req/s, "
                          f"p50 {measured['p50_ms']:.0f} ms, failures {measured['failures']}", file=sys.stderr)
    print(f"\nWhole answers of {args.max_tokens} tokens, medians of {args.rounds} rounds (min-max):\n")
    print("| concurrency | path | requests/s | p50 ms | p90 ms | server CPU ms per request |")
    print("|---|---|---|---|---|---|")
    for level, paths in results.items():
        for path, runs in paths.items():
            roles = sorted({role for run_ in runs for role in run_["cpu_ms_per_request"]})
            cpu_text = ", ".join(
                f"{role} {statistics.median(run_['cpu_ms_per_request'].get(role, 0.0) for run_ in runs):.1f}"
                for role in roles)
            print(f"| {level} | {path} | {median_range([r['requests_per_s'] for r in runs])} | "
                  f"{median_range([r['p50_ms'] for r in runs])} | {median_range([r['p90_ms'] for r in runs])} | "
                  f"{cpu_text} |")
        ratios = [s["requests_per_s"] / o["requests_per_s"] for s, o in zip(paths["streamed"], paths["one"])]
        print(f"| {level} | streamed / one | {median_range(ratios, 2)} (paired rounds) | | | |")
    if args.json:
        args.json.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=2))
    failed = sum(r["failures"] for paths in results.values() for runs in paths.values() for r in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
