"""The runs: every (group, concurrency) `--repeats` times with the paths interleaved (in order,
then in reverse, ...) so drift hits every path alike; per run the requests' figures, the CPU
time each server process used and how busy other processes kept the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field

from harness.bench import BenchError, log
from harness.bench import profile as profiling
from harness.bench.load import Target, run_load
from harness.bench.measure import (
    ProcessCpu,
    cpu_delta,
    scrape_stages,
    stage_means_ms,
    summarize_run,
    system_busy_seconds,
    to_ms,
)
from harness.bench.report import run_line


@dataclass
class Bench:
    base_url: str
    args: argparse.Namespace
    cpu: ProcessCpu | None = None
    other_cpu: list[ProcessCpu] = field(default_factory=list)  # servers besides Triton (vLLM's own)
    runs: list[dict] = field(default_factory=list)
    profiles: list[dict] = field(default_factory=list)
    metrics_url: str | None = None  # Triton's metrics endpoint: the chat models' first-token stages

    def requests_for(self, concurrency: int) -> int:
        return self.args.requests or max(32, 4 * concurrency)

    async def measure(self, session, target: Target, concurrency: int, repeat: int, total: int) -> dict:
        cpus = [self.cpu, *self.other_cpu] if self.cpu else []
        cpu_before = [cpu.snapshot() for cpu in cpus]
        client_before = time.process_time()
        busy_before = system_busy_seconds()
        stages_before = scrape_stages(self.metrics_url) if self.metrics_url and target.side.startswith("chat") else None
        results, wall = await self.load(session, target, concurrency, total)
        client_cpu = time.process_time() - client_before
        busy = system_busy_seconds() - busy_before if busy_before is not None else None
        server_cpu = None
        if cpus:
            server_cpu = {}
            for cpu, before in zip(cpus, cpu_before):
                server_cpu.update(cpu_delta(before, cpu.snapshot()))
        stages = None
        if stages_before is not None:
            await asyncio.sleep(0.2)  # (each request's stages are recorded just after its last response)
            stages = stage_means_ms(stages_before, scrape_stages(self.metrics_url), target.model)
        ttfts = [r.ttft for r in results if r.ttft is not None]
        # What everything else on the machine used meanwhile: other people's jobs skew results.
        others = busy - client_cpu - sum(server_cpu.values()) if busy is not None and server_cpu is not None else None
        run = {
            "pair": target.pair,
            "side": target.side,
            "model": target.model,
            "concurrency": concurrency,
            "repeat": repeat,
            "metrics": summarize_run(results, wall),
            "first_token_stages_ms": stages,
            "ttft_mean_ms": to_ms(sum(ttfts) / len(ttfts)) if ttfts else None,
            "client_cpu_s": client_cpu,
            "server_cpu_s": server_cpu,
            "machine_busy_cores": busy / wall if busy is not None else None,
            "other_processes_cores": max(0.0, others) / wall if others is not None else None,
            "per_request": [
                {
                    "ttft_ms": to_ms(r.ttft),
                    "first_event_ms": to_ms(r.first_event - r.start) if r.first_event is not None else None,
                    "latency_ms": to_ms(r.end - r.start),
                    "chunks": len(r.text_times),
                    "tokens": r.tokens,
                    "prompt_tokens": r.prompt_tokens,
                }
                for r in results
            ],
        }
        return run

    async def load(self, session, target: Target, concurrency: int, total: int):
        """`run_load`, turning a stream that stays silent into a BenchError (with stack dumps)."""
        try:
            return await run_load(session, self.base_url, target, concurrency, total, self.args.max_tokens)
        except asyncio.TimeoutError:
            dumps = profiling.dump_stacks(self.cpu, target.model, self.args.out) if self.cpu else []
            raise BenchError(
                f"{target.side} {target.model} at concurrency {concurrency}: a stream sent nothing for "
                f"{self.args.timeout:g} s; the server is stuck" + (f" (stacks: {', '.join(dumps)})" if dumps else "")
            ) from None

    def start_profile(self, target: Target, concurrency: int, repeat: int) -> dict | None:
        """py-spy sampling the chat model's stub processes for this run, when `--profile` asks for it."""
        if repeat != 0 or (target.side, concurrency) not in self.args.profile or not self.cpu:
            return None
        return profiling.start_recording(self.cpu, target, concurrency, self.args.out)

    def finish_profile(self, recording: dict) -> None:
        self.profiles.append(profiling.finish_recording(recording, self.args.out))

    async def warm_up(self, session, group: list[Target]) -> None:
        """A few requests per side; also checks that every side sees the same prompt."""
        concurrency = min(4, max(self.args.concurrency))
        prompt_tokens = {}
        for target in group:
            results, _ = await self.load(session, target, concurrency, 2 * concurrency)
            prompt_tokens[target.side] = {r.prompt_tokens for r in results}
        if len({frozenset(v) for v in prompt_tokens.values()}) != 1:
            raise BenchError(f"{group[0].pair}: the sides' prompts differ in length: {prompt_tokens}")
        log(f"[{group[0].pair}] warm-up done; prompt {prompt_tokens['raw'].pop()} tokens on every side")

    def session(self):
        """The HTTP client of the runs (call it in the event loop): a connection for every client,
        reads that fail after `--timeout` seconds of silence."""
        import aiohttp  # noqa: PLC0415

        limit = max(self.args.concurrency) + 8
        # Idle connections are dropped after 2 s, before a server closes them itself (uvicorn,
        # under vLLM's server and the gateway, after 5 s): a request must never go out on a
        # connection the server is closing, which fails the run while the paths take turns.
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=2.0)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.args.timeout)
        return aiohttp.ClientSession(connector=connector, timeout=timeout)

    async def run(self, groups: list[list[Target]]) -> None:
        async with self.session() as session:
            for group in groups:
                await self.warm_up(session, group)
                for concurrency in self.args.concurrency:
                    total = self.requests_for(concurrency)
                    for repeat in range(self.args.repeats):
                        # Sides in order, then in reverse: a steady drift cancels out over two repeats.
                        for target in group if repeat % 2 == 0 else group[::-1]:
                            profile = self.start_profile(target, concurrency, repeat)
                            try:
                                run = await self.measure(session, target, concurrency, repeat, total)
                            finally:
                                if profile is not None:
                                    self.finish_profile(profile)
                            self.runs.append(run)
                            log(f"[{target.pair} c={concurrency} #{repeat + 1} {target.side:16}] " + run_line(run))
                            await asyncio.sleep(self.args.pause)
