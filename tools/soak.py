"""Soak: a long run of ordinary streams against `openai_chat` on the fixed-rate stand-in.

    python tools/soak.py [--requests 20000] [--concurrency 64] [--tokens 32]

Starts a server with the scripted model (one token per `--interval-ms`), streams `--requests`
chat requests from `--concurrency` clients, and samples the `openai_chat` stub process (RSS,
threads) every few seconds. Passes when every request completed, the stub's RSS grew less than
5% after warm-up (the first quarter), its thread count stayed flat, and the p99 first-token
latency of the last quarter is within 10% of the first quarter's (or within 5 ms: on two shared
cores a few milliseconds are noise). Prints the figures as JSON; exits 1 on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.bench.measure import ProcessCpu  # noqa: E402
from harness.bench.paths import generate_body, scripted_content  # noqa: E402
from tritonchat.sse import data_of  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """The value at the nearest rank (the soak's criterion; not interpolated)."""
    data = sorted(values)
    return data[min(len(data) - 1, int(round((len(data) - 1) * q / 100)))]


def stub_pid(server, model: str) -> int:
    """The model's stub process among the server's."""
    cpu = ProcessCpu(server.process.pid)
    cpu.snapshot()
    pids = cpu.pids(model)
    if not pids:
        raise RuntimeError(f"no stub process for {model}")
    return pids[0]


def sample(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"t": time.monotonic(), "rss_kb": int(fields["VmRSS"].split()[0]), "threads": int(fields["Threads"])}


async def run(url: str, model: str, body: bytes, total: int, concurrency: int, pid: int, tokens: int) -> dict:
    import aiohttp  # noqa: PLC0415

    ttfts: list[tuple[int, float]] = []
    errors = 0
    issued = 0
    samples = [sample(pid)]

    async def one(session, index: int):
        nonlocal errors
        start = time.perf_counter()
        first = None
        async with session.post(f"http://{url}/v2/models/{model}/generate_stream", data=body) as response:
            text = b""
            async for line in response.content:
                if first is None and b'\\"content\\":\\"tok' in (data_of(line) or b""):
                    first = time.perf_counter() - start
                text += line
        if response.status != 200 or b'"error"' in text or text.count(b"tok ") != tokens:
            errors += 1
        elif first is not None:
            ttfts.append((index, first))

    async def worker(session):
        nonlocal issued
        while issued < total:
            index = issued
            issued += 1
            await one(session, index)

    async def sampler():
        while issued < total:
            await asyncio.sleep(5)
            samples.append(sample(pid))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        task = asyncio.create_task(sampler())
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        task.cancel()
    samples.append(sample(pid))
    return {"ttfts": ttfts, "errors": errors, "samples": samples}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--interval-ms", type=float, default=2.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    from harness.bench.servers import scripted_server  # noqa: PLC0415

    server = scripted_server("chat_scripted", prefix="soak-repo-")
    script = scripted_content(args.tokens, args.interval_ms)
    body = json.dumps(generate_body({"messages": [{"role": "user", "content": script}], "stream": True}))
    started = time.monotonic()
    try:
        server.start()
        server.wait_ready(timeout=300)
        pid = stub_pid(server, "chat_scripted")
        result = asyncio.run(run(server.http_url, "chat_scripted", body.encode(), args.requests, args.concurrency, pid,
                                 args.tokens))
    finally:
        server.stop()
    samples = result["samples"]
    quarter = args.requests // 4
    first = [t for i, t in result["ttfts"] if i < quarter]
    last = [t for i, t in result["ttfts"] if i >= args.requests - quarter]
    warm = [s for s in samples if s["t"] >= samples[0]["t"] + (samples[-1]["t"] - samples[0]["t"]) / 4]
    rss_growth = (samples[-1]["rss_kb"] - warm[0]["rss_kb"]) / warm[0]["rss_kb"]
    threads = sorted({s["threads"] for s in warm})
    p99_first, p99_last = percentile(first, 99) * 1000, percentile(last, 99) * 1000
    summary = {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "seconds": round(time.monotonic() - started, 1),
        "errors": result["errors"],
        "stub_rss_mb_after_warmup": round(warm[0]["rss_kb"] / 1024, 1),
        "stub_rss_mb_at_end": round(samples[-1]["rss_kb"] / 1024, 1),
        "stub_rss_growth_after_warmup": round(rss_growth, 4),
        "stub_threads_after_warmup": threads,
        "ttft_p99_ms_first_quarter": round(p99_first, 2),
        "ttft_p99_ms_last_quarter": round(p99_last, 2),
    }
    ok = (result["errors"] == 0 and rss_growth < 0.05 and max(threads) - min(threads) <= 2
          and (p99_last <= p99_first * 1.10 or p99_last - p99_first <= 5.0))
    summary["passed"] = ok
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
