"""Benchmark `openai_chat` against the raw generation model it calls, in one run.

    python tools/bench.py [--concurrency 1,16,64] [--paths vllm,scripted] [--repeats 3] ...

Two pairs of paths, each pair doing the same work on both sides:
- `vllm`: `openai_chat` -> `vllm_model` (the tiny chat model on the local vLLM backend),
  against `vllm_model` called directly with the prompt `openai_chat` would render;
- `scripted`: `chat_scripted` -> `scripted_vllm` (a fake engine emitting one token every
  `--scripted-interval-ms`), against `scripted_vllm` called directly. No engine competes
  for the CPU here, so this pair isolates what the chat layer itself costs.

Both sides stream over Triton's HTTP `generate_stream` (server-sent events), from a
closed loop of `concurrency` clients each sending its next request as soon as the
previous one ends. Every request produces exactly `--max-tokens` tokens (checked).

Per request: time to the first event carrying generated text (TTFT), gaps between
text-carrying events (ITL), how many such events (chunks) and tokens. `openai_chat`
merges outputs that are already waiting into one chunk when it falls behind, so it may
send fewer, larger chunks than the raw path: compare tokens/s as well as chunks/s.

Each (pair, concurrency) runs `--repeats` times with raw and chat runs interleaved
(raw, chat, then chat, raw, ...) so drift hits both sides alike; the report gives
medians with their min-max spread, chat/raw ratios of paired runs and the project's
targets. When this script starts the server itself it also reports the CPU time each
server process used per token, and how busy other processes kept the machine (a shared
2-core machine makes every figure noisy). Every per-run number goes to the JSON file.

Any error response, wrong token count or stream silent for `--timeout` seconds fails the
run; for a silent stream the stacks of the stuck model's stub are saved next to the JSON.

By default a tritonserver is started on free ports with a temporary model repository;
`--url host:port` uses a running one instead (see the `--*-model` options for names).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_TOKENIZER = ROOT / "build" / "tiny-chat"
VLLM_PROMPT = "Tell me a long story about a lighthouse keeper and the ships she guided home."
SIDES = ("raw", "chat")
RESULT_KEYS = (
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "tpot_p50_ms",
    "chunks_per_s",
    "tokens_per_s",
    "requests_per_s",
    "tokens_per_chunk",
    "wall_s",
)
LATENCY_KEYS = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "tpot_p50_ms")
THROUGHPUT_KEYS = ("chunks_per_s", "tokens_per_s", "requests_per_s")


class BenchError(RuntimeError):
    """The benchmark cannot give a valid result (an error response, wrong token count...)."""


# ---- statistics (pure) ---------------------------------------------------------------------


def percentile(values, q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between ranks; None when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    data = sorted(values)
    if not data:
        return None
    position = (len(data) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


@dataclass
class RequestResult:
    """What the client saw of one streamed request (times in seconds, perf_counter clock)."""

    start: float
    end: float
    first_event: float | None = None  # arrival of the first event of any kind (chat: the role chunk)
    text_times: list[float] = field(default_factory=list)  # arrival of each text-carrying event
    tokens: int = 0
    prompt_tokens: int | None = None

    @property
    def ttft(self) -> float | None:
        return self.text_times[0] - self.start if self.text_times else None

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.text_times, self.text_times[1:])]

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first event: robust to chunks holding several tokens."""
        if len(self.text_times) < 2 or self.tokens < 2:
            return None
        return (self.text_times[-1] - self.text_times[0]) / (self.tokens - 1)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def summarize_run(results: list[RequestResult], wall_s: float) -> dict:
    """Per-run figures: latency percentiles in ms (ITL pooled over all gaps), rates per wall second."""
    ttfts = [r.ttft for r in results if r.ttft is not None]
    first_events = [r.first_event - r.start for r in results if r.first_event is not None]
    gaps = [g for r in results for g in r.gaps]
    tpots = [r.tpot for r in results if r.tpot is not None]
    chunks = sum(len(r.text_times) for r in results)
    tokens = sum(r.tokens for r in results)
    return {
        "requests": len(results),
        "chunks": chunks,
        "tokens": tokens,
        "ttft_p50_ms": _ms(percentile(ttfts, 50)),
        "ttft_p99_ms": _ms(percentile(ttfts, 99)),
        "first_event_p50_ms": _ms(percentile(first_events, 50)),
        "itl_p50_ms": _ms(percentile(gaps, 50)),
        "itl_p99_ms": _ms(percentile(gaps, 99)),
        "tpot_p50_ms": _ms(percentile(tpots, 50)),
        "chunks_per_s": chunks / wall_s if wall_s > 0 else None,
        "tokens_per_s": tokens / wall_s if wall_s > 0 else None,
        "requests_per_s": len(results) / wall_s if wall_s > 0 else None,
        "tokens_per_chunk": tokens / chunks if chunks else None,
        "wall_s": wall_s,
    }


def spread(values) -> dict | None:
    """Median, min and max of the values that are not None."""
    data = [v for v in values if v is not None]
    if not data:
        return None
    return {"median": statistics.median(data), "min": min(data), "max": max(data), "n": len(data)}


def paired_comparison(raw_runs: list[dict], chat_runs: list[dict]) -> dict:
    """chat vs raw over paired runs (repeat i of each): throughput ratios, latency differences and ratios."""
    out: dict[str, dict] = {}
    pairs = list(zip(raw_runs, chat_runs))
    for key in THROUGHPUT_KEYS + ("tokens_per_chunk",):
        out[f"{key}_ratio"] = spread(c[key] / r[key] for r, c in pairs if c[key] is not None and r[key])
    for key in LATENCY_KEYS:
        valid = [(r[key], c[key]) for r, c in pairs if r[key] is not None and c[key] is not None]
        out[f"{key}_diff"] = spread(c - r for r, c in valid)
        out[f"{key}_ratio"] = spread(c / r for r, c in valid if r > 0)
    return out


def summarize_level(runs: list[dict]) -> dict:
    """Median/min/max per metric over repeats of one (pair, concurrency, side)."""
    return {key: spread(run["metrics"][key] for run in runs) for key in RESULT_KEYS}


# ---- responses of the two paths (pure) -----------------------------------------------------


@dataclass
class Event:
    text: str = ""
    tokens: int | None = None  # completion tokens this event reports (raw: delta; chat: usage total)
    prompt_tokens: int | None = None


def _error(path: str, message) -> BenchError:
    return BenchError(f"{path}: error response: {message}")


def _scalar(value):
    """A generate-extension output value: a scalar, or a one-element list for shaped tensors."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


def parse_raw_event(event: dict) -> Event:
    """One `generate_stream` event of the vLLM-interface model (text is a delta)."""
    if "error" in event:
        raise _error("raw", event["error"])
    tokens = _scalar(event.get("num_output_tokens"))
    prompt = _scalar(event.get("num_input_tokens"))
    return Event(
        text=_scalar(event.get("text_output")) or "",
        tokens=None if tokens is None else int(tokens),
        prompt_tokens=None if prompt is None else int(prompt),
    )


def parse_chat_event(event: dict) -> Event:
    """One `generate_stream` event of `openai_chat`: a `chat.completion.chunk` in `response`."""
    if "error" in event:
        raise _error("chat", event["error"])
    return parse_chunk(json.loads(event["response"]))


def parse_gateway_event(event: dict) -> Event:
    """One server-sent event of the OpenAI-compatible gateway: the chunk itself."""
    if "error" in event:
        raise _error("gateway", event["error"])
    return parse_chunk(event)


def parse_chunk(chunk: dict) -> Event:
    text = "".join(choice["delta"].get("content") or "" for choice in chunk.get("choices") or ())
    usage = chunk.get("usage")
    if usage:
        return Event(text=text, tokens=usage["completion_tokens"], prompt_tokens=usage["prompt_tokens"])
    return Event(text=text)


# ---- requests of the two paths ---------------------------------------------------------------


@dataclass
class Target:
    """One side of a pair: a model and the exact `generate_stream` body sent to it."""

    pair: str  # "vllm" or "scripted"
    side: str  # "raw", "chat" or "gateway"
    model: str
    body: dict
    url: str = ""  # where to POST; default: the model's generate_stream on the server

    @property
    def parse(self):
        return {"chat": parse_chat_event, "gateway": parse_gateway_event}.get(self.side, parse_raw_event)

    @property
    def sums_tokens(self) -> bool:
        """Raw events report token deltas to add up; chat reports the total once, in its usage chunk."""
        return self.side == "raw"


def chat_request(content: str, max_tokens: int) -> dict:
    return {
        "messages": [{"role": "user", "content": content}],
        "max_completion_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def raw_body(prompt: str, max_tokens: int) -> dict:
    """What `openai_chat` itself sends the generation model for `chat_request(...)` (see formats/vllm.py)."""
    sampling = {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    return {
        "text_input": prompt,
        "stream": True,
        "exclude_input_in_output": True,
        "sampling_parameters": json.dumps(sampling),
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }


def scripted_content(max_tokens: int, interval_ms: float) -> str:
    return "SCRIPT:" + json.dumps({"repeat": {"text": "tok ", "count": max_tokens}, "interval_ms": interval_ms})


class Renderer:
    """Renders a chat request exactly as `openai_chat` does (same parser, template code, BOS rule)."""

    def __init__(self, tokenizer_path: Path, content_format: str = "auto"):
        from tritonchat.template import PromptRenderer, load_tokenizer  # noqa: PLC0415  (heavy)

        self._renderer = PromptRenderer(load_tokenizer(str(tokenizer_path)), content_format)

    def __call__(self, request: dict) -> str:
        from tritonchat.protocol import parse_chat_request  # noqa: PLC0415

        return self._renderer.render(parse_chat_request(json.dumps(request))).text


def build_targets(args, renderer: Renderer) -> list[tuple[Target, Target]]:
    """(raw, chat) per selected pair, both doing the same work."""
    pairs = []
    for pair in args.paths:
        if pair == "vllm":
            content, raw_model, chat_model = VLLM_PROMPT, args.raw_model, args.chat_model
        else:
            content = scripted_content(args.max_tokens, args.scripted_interval_ms)
            raw_model, chat_model = args.raw_scripted_model, args.chat_scripted_model
        chat = chat_request(content, args.max_tokens)
        raw = raw_body(renderer(chat), args.max_tokens)
        pairs.append(
            (
                Target(pair, "raw", raw_model, raw),
                Target(pair, "chat", chat_model, {"request": json.dumps(chat)}),
            )
        )
    return pairs


# ---- the load generator -----------------------------------------------------------------------


async def stream_one(session, base_url: str, target: Target, payload: bytes, expect_tokens: int) -> RequestResult:
    url = target.url or f"{base_url}/v2/models/{target.model}/generate_stream"
    parse = target.parse
    start = time.perf_counter()
    result = RequestResult(start=start, end=start)
    tokens = 0
    async with session.post(url, data=payload, headers={"Content-Type": "application/json"}) as response:
        if response.status != 200:
            raise BenchError(f"{target.side} {target.model}: HTTP {response.status}: {(await response.text())[:500]}")
        async for line in response.content:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            now = time.perf_counter()
            if result.first_event is None:
                result.first_event = now
            event = parse(json.loads(line[6:]))
            if event.text:
                result.text_times.append(now)
            if event.tokens is not None:
                tokens = tokens + event.tokens if target.sums_tokens else event.tokens
            if event.prompt_tokens is not None:
                result.prompt_tokens = event.prompt_tokens
    result.end = time.perf_counter()
    result.tokens = tokens
    if tokens != expect_tokens or not result.text_times:
        raise BenchError(
            f"{target.side} {target.model}: expected {expect_tokens} tokens, got {tokens} "
            f"in {len(result.text_times)} text events"
        )
    return result


async def run_load(session, base_url: str, target: Target, concurrency: int, total: int, expect_tokens: int):
    """Closed loop: `concurrency` workers send requests back to back until `total` are done."""
    payload = json.dumps(target.body).encode()
    results: list[RequestResult] = []
    issued = 0

    async def worker():
        nonlocal issued
        while issued < total:
            issued += 1
            results.append(await stream_one(session, base_url, target, payload, expect_tokens))

    start = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, total))]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return results, time.perf_counter() - start


# ---- server CPU accounting (Linux /proc) ------------------------------------------------------


class ProcessCpu:
    """CPU seconds used by a process tree, grouped by role.

    Roles: `tritonserver`, one per Python-backend stub (named after its model directory), and
    `<model> children` for what a stub spawned (the vLLM engine processes).
    """

    def __init__(self, root_pid: int):
        self.root_pid = root_pid
        self.tick = os.sysconf("SC_CLK_TCK")
        self._labels: dict[int, str] = {}

    @staticmethod
    def _stat(pid: int) -> tuple[int, float] | None:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields_ = text[text.rindex(")") + 2 :].split()
        return int(fields_[1]), int(fields_[11]) + int(fields_[12])  # ppid, utime + stime

    def _label(self, pid: int, parent_label: str | None) -> str:
        if pid == self.root_pid:
            return "tritonserver"
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            argv = []
        if argv and argv[0].endswith(b"triton_python_backend_stub") and len(argv) > 1:
            model_file = Path(argv[1].decode(errors="replace"))
            return model_file.parent.parent.name  # <repository>/<model>/<version>/model.py
        if parent_label and not parent_label.endswith(" children") and parent_label != "tritonserver":
            return f"{parent_label} children"
        return parent_label or "other"

    def snapshot(self) -> dict[str, float]:
        stats = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                stat = self._stat(int(entry))
                if stat:
                    stats[int(entry)] = stat
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        totals: dict[str, float] = {}
        todo = [(self.root_pid, None)] if self.root_pid in stats else []
        while todo:
            pid, parent_label = todo.pop()
            label = self._labels.get(pid) or self._label(pid, parent_label)
            self._labels[pid] = label
            totals[label] = totals.get(label, 0.0) + stats[pid][1] / self.tick
            todo += [(child, label) for child in children.get(pid, ())]
        return totals

    def pids(self, label: str) -> list[int]:
        """Processes seen with this role (call `snapshot` first)."""
        return [pid for pid, known in self._labels.items() if known == label and Path(f"/proc/{pid}").exists()]


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {label: after[label] - before.get(label, 0.0) for label in after}


def system_busy_seconds() -> float | None:
    """CPU seconds all processes on this machine have used (from /proc/stat), or None."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# ---- the benchmark ------------------------------------------------------------------------------


@dataclass
class Bench:
    base_url: str
    args: argparse.Namespace
    cpu: ProcessCpu | None = None
    runs: list[dict] = field(default_factory=list)

    def requests_for(self, concurrency: int) -> int:
        return self.args.requests or max(32, 4 * concurrency)

    async def measure(self, session, target: Target, concurrency: int, repeat: int, total: int) -> dict:
        cpu_before = self.cpu.snapshot() if self.cpu else None
        client_before = time.process_time()
        busy_before = system_busy_seconds()
        results, wall = await self.load(session, target, concurrency, total)
        client_cpu = time.process_time() - client_before
        busy = system_busy_seconds() - busy_before if busy_before is not None else None
        server_cpu = cpu_delta(cpu_before, self.cpu.snapshot()) if self.cpu else None
        # What everything else on the machine used meanwhile: other people's jobs skew results.
        others = busy - client_cpu - sum(server_cpu.values()) if busy is not None and server_cpu is not None else None
        run = {
            "pair": target.pair,
            "side": target.side,
            "model": target.model,
            "concurrency": concurrency,
            "repeat": repeat,
            "metrics": summarize_run(results, wall),
            "client_cpu_s": client_cpu,
            "server_cpu_s": server_cpu,
            "machine_busy_cores": busy / wall if busy is not None else None,
            "other_processes_cores": max(0.0, others) / wall if others is not None else None,
            "per_request": [
                {
                    "ttft_ms": _ms(r.ttft),
                    "first_event_ms": _ms(r.first_event - r.start) if r.first_event is not None else None,
                    "latency_ms": _ms(r.end - r.start),
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
            dumps = self.dump_stacks(target)
            raise BenchError(
                f"{target.side} {target.model} at concurrency {concurrency}: a stream sent nothing for "
                f"{self.args.timeout:g} s; the server is stuck" + (f" (stacks: {', '.join(dumps)})" if dumps else "")
            ) from None

    def dump_stacks(self, target: Target) -> list[str]:
        """Python and native stacks of the model's stub processes (needs py-spy), for a stuck server."""
        py_spy = Path(sys.executable).with_name("py-spy")
        if not self.cpu or not py_spy.exists():
            return []
        self.cpu.snapshot()
        files = []
        for pid in self.cpu.pids(target.model):
            path = self.args.out.with_name(f"{self.args.out.stem}-stuck-{target.model}-{pid}.txt")
            with open(path, "w") as f:
                subprocess.run([str(py_spy), "dump", "--native", "--pid", str(pid)], stdout=f, stderr=subprocess.STDOUT,
                               timeout=60, check=False)
            files.append(str(path))
        return files

    async def warm_up(self, session, raw: Target, chat: Target) -> None:
        """A few requests per side; also checks that both sides see the same prompt."""
        concurrency = min(4, max(self.args.concurrency))
        prompt_tokens = {}
        for target in (raw, chat):
            results, _ = await self.load(session, target, concurrency, 2 * concurrency)
            prompt_tokens[target.side] = {r.prompt_tokens for r in results}
        if prompt_tokens["raw"] != prompt_tokens["chat"]:
            raise BenchError(f"{raw.pair}: raw and chat prompts differ in length: {prompt_tokens}")
        log(f"[{raw.pair}] warm-up done; prompt {prompt_tokens['raw'].pop()} tokens on both sides")

    async def run(self, pairs: list[tuple[Target, Target]]) -> None:
        import aiohttp  # noqa: PLC0415

        limit = max(self.args.concurrency) + 8
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.args.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            for raw, chat in pairs:
                await self.warm_up(session, raw, chat)
                for concurrency in self.args.concurrency:
                    total = self.requests_for(concurrency)
                    for repeat in range(self.args.repeats):
                        # raw, chat, then chat, raw: a steady drift cancels out over two repeats.
                        order = (raw, chat) if repeat % 2 == 0 else (chat, raw)
                        for target in order:
                            run = await self.measure(session, target, concurrency, repeat, total)
                            self.runs.append(run)
                            log(f"[{target.pair} c={concurrency} #{repeat + 1} {target.side:4}] " + run_line(run))
                            await asyncio.sleep(self.args.pause)


def run_line(run: dict) -> str:
    m = run["metrics"]
    line = (
        f"{_num(m['chunks_per_s'])} chunks/s, {_num(m['tokens_per_s'])} tokens/s, "
        f"TTFT p50 {_num(m['ttft_p50_ms'])} ms, ITL p50 {_num(m['itl_p50_ms'])} ms, {_num(m['wall_s'])} s"
    )
    others = run["other_processes_cores"]
    return line + (f" (other processes: {others:.2f} cores)" if others is not None else "")


def summarize(runs: list[dict], args) -> list[dict]:
    summary = []
    for pair in args.paths:
        for concurrency in args.concurrency:
            level = {
                side: sorted(
                    (r for r in runs if r["pair"] == pair and r["side"] == side and r["concurrency"] == concurrency),
                    key=lambda r: r["repeat"],
                )
                for side in SIDES
            }
            if not level["raw"] or not level["chat"]:
                continue
            entry = {
                "pair": pair,
                "concurrency": concurrency,
                "raw": summarize_level(level["raw"]),
                "chat": summarize_level(level["chat"]),
                "chat_vs_raw": paired_comparison(
                    [r["metrics"] for r in level["raw"]], [r["metrics"] for r in level["chat"]]
                ),
            }
            cpu = {}
            for side in SIDES:
                per_label: dict[str, list[float]] = {}
                for r in level[side]:
                    tokens = r["metrics"]["tokens"]
                    for label, seconds in (r["server_cpu_s"] or {}).items():
                        per_label.setdefault(label, []).append(1e6 * seconds / tokens)
                    per_label.setdefault("bench client", []).append(1e6 * r["client_cpu_s"] / tokens)
                cpu[side] = {label: spread(values) for label, values in per_label.items()}
            entry["cpu_us_per_token"] = cpu
            entry["other_processes_cores"] = {
                side: spread(r.get("other_processes_cores") for r in level[side]) for side in SIDES
            }
            summary.append(entry)
    return summary


BURST_ITL_MS = 0.1  # inter-token gaps this small mean whole streams arrive at once


def check_targets(summary: list[dict]) -> list[dict]:
    """The project's targets: chat >= 0.8x raw chunks/s at 16 and 64; <= 3 ms added TTFT p50 at 1."""
    checks = []
    for entry in summary:
        cmp = entry["chat_vs_raw"]
        raw_itl = entry["raw"]["itl_p50_ms"]
        bursty = bool(raw_itl and raw_itl["median"] < BURST_ITL_MS)
        if entry["concurrency"] in (16, 64) and cmp["chunks_per_s_ratio"]:
            value = cmp["chunks_per_s_ratio"]["median"]
            checks.append(
                {
                    "pair": entry["pair"],
                    "what": f"chunks/s chat/raw at concurrency {entry['concurrency']} >= 0.8",
                    "value": value,
                    "ok": value >= 0.8,
                    "note": None,
                }
            )
        if entry["concurrency"] == 1 and cmp["ttft_p50_ms_diff"]:
            value = cmp["ttft_p50_ms_diff"]["median"]
            checks.append(
                {
                    "pair": entry["pair"],
                    "what": "added TTFT p50 at concurrency 1 <= 3 ms",
                    "value": value,
                    "ok": value <= 3.0,
                    # The raw streams arrive whole, so their first token says nothing about the chat layer.
                    "note": "not meaningful: raw streams arrive in one burst (ITL p50 < 0.1 ms)" if bursty else None,
                }
            )
    return checks


# ---- report ---------------------------------------------------------------------------------------


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_spread(s: dict | None, suffix: str = "") -> str:
    if not s:
        return "-"
    if s["n"] == 1:
        return f"{_num(s['median'])}{suffix}"
    return f"{_num(s['median'])}{suffix} ({_num(s['min'])}-{_num(s['max'])})"


def fmt_latency_change(diff: dict | None, ratio: dict | None) -> str:
    """`+1.23 (1.4x)`: chat - raw in ms, then chat/raw."""
    if not diff:
        return "-"
    return f"{diff['median']:+.2f}" + (f" ({_num(ratio['median'])}x)" if ratio else "")


COLUMNS = [
    ("TTFT p50 ms", "ttft_p50_ms"),
    ("TTFT p99 ms", "ttft_p99_ms"),
    ("ITL p50 ms", "itl_p50_ms"),
    ("ITL p99 ms", "itl_p99_ms"),
    ("ms/token p50", "tpot_p50_ms"),
    ("chunks/s", "chunks_per_s"),
    ("tokens/s", "tokens_per_s"),
    ("req/s", "requests_per_s"),
    ("tokens/chunk", "tokens_per_chunk"),
]


def pair_title(pair: str, args) -> str:
    if pair == "vllm":
        return f"vLLM engine, tiny model (`{args.chat_model}` vs `{args.raw_model}`)"
    return (
        f"scripted fake engine, one token every {args.scripted_interval_ms:g} ms "
        f"(`{args.chat_scripted_model}` vs `{args.raw_scripted_model}`)"
    )


def markdown_report(summary: list[dict], checks: list[dict], args) -> str:
    lines = [
        f"# openai_chat vs raw generate_stream: {args.max_tokens} tokens per request, "
        f"medians of {args.repeats} runs (min-max)",
        "",
        "chunks = events carrying generated text; the chat layer merges outputs that wait, so "
        "compare tokens/s too. ms/token = (last text event - first) / (tokens - 1) per request. "
        "Ratio rows: chat vs raw over paired runs; latencies as chat - raw in ms (chat/raw ratio).",
    ]
    for pair in args.paths:
        entries = [e for e in summary if e["pair"] == pair]
        if not entries:
            continue
        lines += ["", f"## {pair_title(pair, args)}", ""]
        lines.append("| conc | path | " + " | ".join(name for name, _ in COLUMNS) + " |")
        lines.append("|---|---|" + "---|" * len(COLUMNS))
        for e in entries:
            c = e["concurrency"]
            for side in SIDES:
                cells = [fmt_spread(e[side][key]) for _, key in COLUMNS]
                lines.append(f"| {c} | {side} | " + " | ".join(cells) + " |")
            cmp = e["chat_vs_raw"]
            cells = []
            for _, key in COLUMNS:
                if key in LATENCY_KEYS:
                    cells.append(fmt_latency_change(cmp[f"{key}_diff"], cmp[f"{key}_ratio"]))
                elif f"{key}_ratio" in cmp:
                    cells.append(fmt_spread(cmp[f"{key}_ratio"], "x"))
                else:
                    cells.append("")
            lines.append(f"| {c} | **chat/raw** | " + " | ".join(cells) + " |")
    # Only when this script ran the server: otherwise the client's own CPU is all there is.
    cpu_rows = [e for e in summary if any(set(e["cpu_us_per_token"][s]) - {"bench client"} for s in SIDES)]
    if cpu_rows:
        labels = sorted({label for e in cpu_rows for s in SIDES for label in e["cpu_us_per_token"][s]})
        lines += [
            "",
            "## CPU time per generated token (µs, medians), by process",
            "",
            "Last column: CPU cores that processes outside this benchmark kept busy during the runs "
            "(max over runs); much above 0 means the figures are disturbed.",
            "",
        ]
        lines.append("| pair | conc | path | " + " | ".join(labels) + " | other processes (cores) |")
        lines.append("|---|---|---|" + "---|" * (len(labels) + 1))
        for e in cpu_rows:
            for side in SIDES:
                cpu = e["cpu_us_per_token"][side]
                cells = [_num(cpu[label]["median"]) if cpu.get(label) else "-" for label in labels]
                others = e["other_processes_cores"][side]
                cells.append(_num(others["max"]) if others else "-")
                lines.append(f"| {e['pair']} | {e['concurrency']} | {side} | " + " | ".join(cells) + " |")
    if checks:
        lines += ["", "## Targets", ""]
        for check in checks:
            value = f"{check['value']:+.2f} ms" if "ms" in check["what"] else f"{check['value']:.2f}x"
            note = f" ({check['note']})" if check.get("note") else ""
            lines.append(f"- {'PASS' if check['ok'] else 'FAIL'} [{check['pair']}] {check['what']}: {value}{note}")
    return "\n".join(lines) + "\n"


# ---- the server -------------------------------------------------------------------------------


def set_instance_count(config_path: Path, count: int) -> None:
    """Set the `count:` of the (first) instance_group in a config.pbtxt."""
    text = config_path.read_text()
    head, sep, tail = text.partition("instance_group")
    tail, replaced = re.subn(r"count:\s*\d+", f"count: {count}", tail, count=1)
    if not sep or not replaced:
        raise BenchError(f"{config_path}: no instance_group with a count")
    config_path.write_text(head + sep + tail)


def build_repository(repo: Path, args, grpc_port: int, http_port: int) -> None:
    """The models the selected pairs need, as tests/conftest.py builds them."""
    from tools.repositories import add_chat_model, add_test_model, add_vllm_model  # noqa: PLC0415

    transport = {"transport": args.transport, "grpc_url": f"127.0.0.1:{grpc_port}", "http_url": f"127.0.0.1:{http_port}",
                 **{key: str(value) for key, value in args.chat_parameter}}
    chat_dirs = []
    if "vllm" in args.paths:
        add_vllm_model(repo, args.raw_model, args.tokenizer, **dict(args.engine_arg))
        chat_dirs.append(add_chat_model(repo, args.chat_model, target_model=args.raw_model, **transport))
    if "scripted" in args.paths:
        add_test_model(repo, args.raw_scripted_model, "scripted_vllm")
        chat_dirs.append(
            add_chat_model(
                repo,
                args.chat_scripted_model,
                target_model=args.raw_scripted_model,
                tokenizer=str(args.tokenizer),
                served_model_name="scripted",
                **transport,
            )
        )
    for chat_dir in chat_dirs:
        set_instance_count(chat_dir / "config.pbtxt", args.instances)


def git_revision() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "src", "model_repository"], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- command line -----------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from tritonchat.repository import parse_engine_arg  # noqa: PLC0415

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", type=_int_list, default=[1, 16, 64], help="levels, e.g. 1,16,64")
    p.add_argument("--requests", type=int, default=0, help="requests per run (default: max(32, 4 x concurrency))")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens every request generates")
    p.add_argument("--repeats", type=int, default=3, help="runs per (pair, concurrency, side)")
    p.add_argument("--paths", type=_paths, default=["vllm", "scripted"], help="pairs to run: vllm,scripted")
    p.add_argument("--scripted-interval-ms", type=float, default=2.0, help="the fake engine's time per token")
    p.add_argument("--instances", type=int, default=1, help="instance_group count of the chat models")
    p.add_argument("--transport", choices=("http", "grpc", "bls"), default="grpc",
                   help="how the chat models read the generation stream (config parameter 'transport')")
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


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def start_server(args, out: Path):
    """A tritonserver on free ports serving a fresh repository; returns it and the repository directory."""
    from tools.tritonlocal import TritonServer, free_port  # noqa: PLC0415

    repo_dir = Path(tempfile.mkdtemp(prefix="bench-repo-"))
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    build_repository(repo_dir, args, grpc_port, http_port)
    server_log = out.with_name(out.stem + "-tritonserver.log")
    server = TritonServer(repo_dir, http_port, grpc_port, metrics_port, log_path=server_log)
    log(f"starting tritonserver (log: {server_log})")
    server.start()
    return server, repo_dir


def process_group_members(pgid: int) -> dict[int, str]:
    """pid -> command line of the processes in a process group."""
    members = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[2]) == pgid:
            members[int(entry)] = cmdline.strip()
    return members


def stop_server(server, repo_dir: Path) -> None:
    server.stop()
    # A stub that hangs can outlive tritonserver; it is still in the server's process group.
    left = process_group_members(server.process.pid)
    if left:
        for pid, cmdline in left.items():
            log(f"left behind by tritonserver, killing: {pid} {cmdline[:160]}")
        try:
            os.killpg(server.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(repo_dir, ignore_errors=True)


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
            "targets": {f"{t.pair}/{t.side}": asdict(t) for pair in pairs for t in pair},
        },
        "summary": summary,
        "targets": checks,
        "runs": bench.runs,
    }
    args.out.write_text(json.dumps(result, indent=1))
    log(f"results: {args.out}")


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.tokenizer == DEFAULT_TOKENIZER.resolve():
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_model.py"), "--out", str(args.tokenizer)],
                       check=True, stdout=sys.stderr)
    pairs = build_targets(args, Renderer(args.tokenizer))

    # `kill` (SIGTERM) ends the benchmark like Ctrl-C does: the server is stopped, results written.
    signal.signal(signal.SIGTERM, _terminate)
    server = repo_dir = None
    bench = Bench(f"http://{args.url}", args)
    started = datetime.now().isoformat(timespec="seconds")
    status = "ok"
    try:
        if not args.url:
            server, repo_dir = start_server(args, args.out)
            server.wait_ready(timeout=600)
            bench.base_url = f"http://{server.http_url}"
            bench.cpu = ProcessCpu(server.process.pid)
            log(f"tritonserver ready at {server.http_url}")
        asyncio.run(bench.run(pairs))
    except BaseException as exc:
        status = f"failed: {exc}"
        raise
    finally:
        if server:
            stop_server(server, repo_dir)
        summary = summarize(bench.runs, args)
        checks = check_targets(summary)
        write_results(args, pairs, bench, summary, checks, started=started, status=status,
                      server_log=server.log_path if server else None)
        if bench.runs:
            if status != "ok":
                print(f"**Incomplete: {status}** (the table shows the runs that finished)\n")
            print(markdown_report(summary, checks, args))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        log(f"benchmark failed: {error}")
        sys.exit(1)
