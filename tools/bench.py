"""Benchmark `openai_chat` against the raw generation model it calls, in one run.

    python tools/bench.py [--concurrency 1,16,64,256] [--paths vllm,scripted] [--repeats 3]
        [--transports http,grpc,bls] [--stream-intervals 4] [--vllm-server] [--profile 'chat http@64']
        [--report docs/bench/bench] ...

Two groups of paths, each path doing the same work:
- `vllm`: `raw` = `vllm_model` (the tiny chat model on the local vLLM backend) called with the
  prompt `openai_chat` would render; `chat <transport>` = `openai_chat` in front of it, one per
  transport; with `--vllm-server`, `vllm serve` = vLLM's own OpenAI server on the same model
  with the same engine settings (its `/v1/chat/completions`, the same chat request);
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
several transports the chat models are `<name>_<transport>`).
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
VLLM_SERVE = "vllm serve"  # vLLM's own OpenAI server on the same model
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
    """One side of a pair: a model and the exact body sent to it.

    `kind` says how its stream reads: `raw` (the generation model's `generate_stream`), `chat`
    (`openai_chat`'s `generate_stream`: a chunk in `response`) or `openai` (OpenAI server-sent
    events: the gateway, vLLM's own server)."""

    pair: str  # "vllm" or "scripted"
    side: str  # "raw", "chat http", "chat grpc si=4", "vllm serve", "gateway"...
    model: str
    body: dict
    url: str = ""  # where to POST; default: the model's generate_stream on the server
    kind: str = ""

    def __post_init__(self):
        if not self.kind:
            self.kind = "raw" if self.side == "raw" else "chat" if self.side.startswith("chat") else "openai"

    @property
    def parse(self):
        return {"raw": parse_raw_event, "chat": parse_chat_event, "openai": parse_gateway_event}[self.kind]

    @property
    def sums_tokens(self) -> bool:
        """Raw events report token deltas to add up; chat reports the total once, in its usage chunk."""
        return self.kind == "raw"


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


def chat_model_name(args, pair: str, transport: str) -> str:
    """The chat model of a pair for one transport: the plain name when only one transport runs."""
    base = args.chat_model if pair == "vllm" else args.chat_scripted_model
    return base if len(args.transports) == 1 else f"{base}_{transport}"


def variant_model_name(args, pair: str, label: str) -> str:
    """The chat model of a `--variant` (the first transport, the variant's parameters)."""
    return f"{chat_model_name(args, pair, args.transports[0])}_{label}"


def build_targets(args, renderer: Renderer) -> list[list[Target]]:
    """Per selected pair: raw first, then `openai_chat` over each transport (and with each stream
    interval, over the first transport), then vLLM's own server on the vLLM pair; all doing the
    same work."""
    groups = []
    for pair in args.paths:
        if pair == "vllm":
            content, raw_model = VLLM_PROMPT, args.raw_model
        else:
            content, raw_model = scripted_content(args.max_tokens, args.scripted_interval_ms), args.raw_scripted_model
        chat = chat_request(content, args.max_tokens)
        group = [Target(pair, "raw", raw_model, raw_body(renderer(chat), args.max_tokens))]
        for transport in args.transports:
            group.append(Target(pair, f"chat {transport}", chat_model_name(args, pair, transport),
                                {"request": json.dumps(chat)}))
        for label, _parameters in args.variant:
            transport = args.transports[0]
            group.append(Target(pair, f"chat {transport} {label}", variant_model_name(args, pair, label),
                                {"request": json.dumps(chat)}))
        for interval in args.stream_intervals:
            transport = args.transports[0]
            request = {**chat, "stream_interval": interval}
            group.append(Target(pair, f"chat {transport} si={interval}", chat_model_name(args, pair, transport),
                                {"request": json.dumps(request)}))
        if pair == "vllm" and args.vllm_server:
            group.append(Target(pair, VLLM_SERVE, "tiny-chat", {"model": "tiny-chat", **chat},
                                url=f"{args.vllm_server}/v1/chat/completions" if args.vllm_server != "start" else ""))
        groups.append(group)
    return groups


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

    def __init__(self, root_pid: int, root_label: str = "tritonserver"):
        self.root_pid = root_pid
        self.root_label = root_label  # another root (vLLM's own server): one role for its whole tree
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
        if pid == self.root_pid or self.root_label != "tritonserver":
            return self.root_label
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


# ---- profiles of the chat model's stub (py-spy, pure helpers) --------------------------------

PROFILE_RATE_HZ = 250
# Where a sample of the stub's Python stacks is spent, by the innermost stage it is in. A stack
# is classified by the first rule (in this order) whose pattern one of its frames contains.
STAGES = (
    ("send", ("triton/sink.py",)),  # payload into tensors, InferenceResponse, the sender's send()
    ("parse", ("tritonchat/formats/",)),  # the request format's decoder: outputs -> text
    ("build", ("tritonchat/chunks.py", "tritonchat/choice_text.py", "tritonchat/parsers/")),  # chunk JSON
    ("receive", ("tritonchat/transports/", "triton/bls.py", "aiohttp/", "grpc/")),  # reading the stream
    ("request setup", ("tritonchat/service.py", "tritonchat/template.py", "tritonchat/protocol/",
                       "tritonchat/plan.py", "jinja2/", "transformers/")),  # parse, render, plan
    ("sender", ("tritonchat/sender.py",)),  # the lanes: queue, merge, cancellation checks
    ("event loop", ("asyncio/",)),
)


def read_collapsed(text: str) -> dict[str, int]:
    """py-spy's `--format raw` (collapsed stacks: `frame;frame;... count`) as stack -> samples."""
    samples: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            samples[stack] = samples.get(stack, 0) + int(count)
    return samples


def stage_of(stack: str) -> str:
    for stage, patterns in STAGES:
        if any(pattern in stack for pattern in patterns):
            return stage
    return "other"


def stage_shares(samples: dict[str, int]) -> dict[str, float]:
    """Share of the samples in each stage (0-1)."""
    total = sum(samples.values())
    shares: dict[str, float] = {}
    for stack, count in samples.items():
        stage = stage_of(stack)
        shares[stage] = shares.get(stage, 0.0) + count / total
    return dict(sorted(shares.items(), key=lambda item: -item[1]))


def _function(frame: str) -> str:
    """`send (tritonchat/triton/sink.py:87)` -> `send (tritonchat/triton/sink.py)`."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def profile_report(samples: dict[str, int], stages: dict[str, float], title: str, top: int = 25) -> str:
    total = sum(samples.values()) or 1
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    for stack, count in samples.items():
        frames = [_function(f) for f in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count
    lines = [f"py-spy samples of {title}: {total} at {PROFILE_RATE_HZ} Hz (threads that were not idle)", "",
             "stage shares:"]
    lines += [f"  {stage:14} {share:6.1%}" for stage, share in stages.items()]
    lines += ["", f"top {top} functions by own samples:"]
    lines += [f"  {count / total:6.1%}  {name}" for name, count in sorted(own.items(), key=lambda i: -i[1])[:top]]
    lines += ["", f"top {top} functions by inclusive samples:"]
    lines += [f"  {count / total:6.1%}  {name}" for name, count in
              sorted(inclusive.items(), key=lambda i: -i[1])[:top]]
    return "\n".join(lines) + "\n"


# ---- the benchmark ------------------------------------------------------------------------------


@dataclass
class Bench:
    base_url: str
    args: argparse.Namespace
    cpu: ProcessCpu | None = None
    other_cpu: list[ProcessCpu] = field(default_factory=list)  # servers besides Triton (vLLM's own)
    runs: list[dict] = field(default_factory=list)
    profiles: list[dict] = field(default_factory=list)

    def requests_for(self, concurrency: int) -> int:
        return self.args.requests or max(32, 4 * concurrency)

    async def measure(self, session, target: Target, concurrency: int, repeat: int, total: int) -> dict:
        cpus = [self.cpu, *self.other_cpu] if self.cpu else []
        cpu_before = [cpu.snapshot() for cpu in cpus]
        client_before = time.process_time()
        busy_before = system_busy_seconds()
        results, wall = await self.load(session, target, concurrency, total)
        client_cpu = time.process_time() - client_before
        busy = system_busy_seconds() - busy_before if busy_before is not None else None
        server_cpu = None
        if cpus:
            server_cpu = {}
            for cpu, before in zip(cpus, cpu_before):
                server_cpu.update(cpu_delta(before, cpu.snapshot()))
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

    def start_profile(self, target: Target, concurrency: int, repeat: int):
        """py-spy sampling the chat model's stub processes for this run, when `--profile` asks for it."""
        if repeat != 0 or (target.side, concurrency) not in self.args.profile or not self.cpu:
            return None
        py_spy = Path(sys.executable).with_name("py-spy")
        self.cpu.snapshot()
        pids = self.cpu.pids(target.model)
        if not py_spy.exists() or not pids:
            log(f"cannot profile {target.model}: " + ("no py-spy" if not py_spy.exists() else "no stub process found"))
            return None
        stem = f"{self.args.out.stem}-profile-{target.pair}-{target.side.replace(' ', '_')}-c{concurrency}"
        recorders = []
        for pid in pids:
            path = self.args.out.with_name(f"{stem}-{pid}.collapsed")
            # --nonblocking: the stub is not paused to be sampled (the figures stay those of a normal run).
            command = [str(py_spy), "record", "--pid", str(pid), "--rate", str(PROFILE_RATE_HZ), "--format", "raw",
                       "--nonblocking", "--duration", "3600", "--output", str(path)]
            recorders.append((subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), path))
        time.sleep(0.5)  # py-spy attaches
        return {"target": target, "concurrency": concurrency, "stem": stem, "recorders": recorders}

    def finish_profile(self, profile: dict) -> None:
        samples: dict[str, int] = {}
        for process, path in profile["recorders"]:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
            if path.exists():
                for stack, count in read_collapsed(path.read_text()).items():
                    samples[stack] = samples.get(stack, 0) + count
        target, concurrency = profile["target"], profile["concurrency"]
        stages = stage_shares(samples)
        text = profile_report(samples, stages, f"{target.model} ({target.side}) at concurrency {concurrency}")
        path = self.args.out.with_name(profile["stem"] + ".txt")
        path.write_text(text)
        self.profiles.append({"pair": target.pair, "side": target.side, "model": target.model,
                              "concurrency": concurrency, "samples": sum(samples.values()), "stages": stages,
                              "report": str(path), "collapsed": [str(p) for _, p in profile["recorders"]]})
        log(f"profile of {target.model} at concurrency {concurrency}: {path}")

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

    async def run(self, groups: list[list[Target]]) -> None:
        import aiohttp  # noqa: PLC0415

        limit = max(self.args.concurrency) + 8
        # Idle connections are dropped after 2 s, before a server closes them itself (uvicorn,
        # under vLLM's server, after 5 s): a request must never go out on a connection the
        # server is closing, which fails the run while the paths take turns.
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=2.0)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.args.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
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

def run_line(run: dict) -> str:
    m = run["metrics"]
    line = (
        f"{_num(m['chunks_per_s'])} chunks/s, {_num(m['tokens_per_s'])} tokens/s, "
        f"TTFT p50 {_num(m['ttft_p50_ms'])} ms, ITL p50 {_num(m['itl_p50_ms'])} ms, {_num(m['wall_s'])} s"
    )
    others = run["other_processes_cores"]
    return line + (f" (other processes: {others:.2f} cores)" if others is not None else "")


def sides_of(runs: list[dict], pair: str) -> list[str]:
    """The sides a pair ran, in the order they first ran (raw first)."""
    seen = []
    for run in runs:
        if run["pair"] == pair and run["side"] not in seen:
            seen.append(run["side"])
    return sorted(seen, key=lambda side: side != "raw")


def summarize(runs: list[dict], args) -> list[dict]:
    """Per (pair, concurrency): each side's medians and ranges, each side against raw (and chat
    against vLLM's own server), and CPU per token by process."""
    summary = []
    for pair in args.paths:
        sides = sides_of(runs, pair)
        for concurrency in args.concurrency:
            level = {
                side: sorted(
                    (r for r in runs if r["pair"] == pair and r["side"] == side and r["concurrency"] == concurrency),
                    key=lambda r: r["repeat"],
                )
                for side in sides
            }
            level = {side: found for side, found in level.items() if found}
            if "raw" not in level or len(level) < 2:
                continue
            metrics = {side: [r["metrics"] for r in found] for side, found in level.items()}
            entry = {
                "pair": pair,
                "concurrency": concurrency,
                "models": {side: found[0]["model"] for side, found in level.items()},
                "sides": {side: summarize_level(found) for side, found in level.items()},
                "vs_raw": {side: paired_comparison(metrics["raw"], metrics[side]) for side in level if side != "raw"},
                "vs_vllm_serve": {
                    side: paired_comparison(metrics[VLLM_SERVE], metrics[side])
                    for side in level if VLLM_SERVE in level and side.startswith("chat")
                },
            }
            cpu = {}
            for side, found in level.items():
                per_label: dict[str, list[float]] = {}
                for r in found:
                    tokens = r["metrics"]["tokens"]
                    for label, seconds in (r["server_cpu_s"] or {}).items():
                        per_label.setdefault(label, []).append(1e6 * seconds / tokens)
                    per_label.setdefault("bench client", []).append(1e6 * r["client_cpu_s"] / tokens)
                cpu[side] = {label: spread(values) for label, values in per_label.items()}
            entry["cpu_us_per_token"] = cpu
            entry["other_processes_cores"] = {
                side: spread(r.get("other_processes_cores") for r in found) for side, found in level.items()
            }
            summary.append(entry)
    return summary


BURST_ITL_MS = 0.1  # inter-token gaps this small mean whole streams arrive at once
STUB_CPU_TARGET_US = 80.0


def _check(pair: str, side: str, what: str, value: float | None, ok: bool, note: str | None = None) -> dict:
    return {"pair": pair, "side": side, "what": what, "value": value, "ok": ok, "note": note}


def check_targets(summary: list[dict]) -> list[dict]:
    """The targets of the chat layer, on the scripted fixed-rate engine (each chat side vs raw,
    in the same run): tokens/s >= 0.85x raw at 16, 64 and 256; added TTFT p50 <= 1.5 ms at 1 and
    <= 10 ms at 16; ITL p50 <= 1.3x raw at 16; CPU in the chat model's stub <= 80 µs per token (at
    64). On the vLLM pair: chat tokens/s at or above vLLM's own server at 64."""
    checks = []
    for entry in summary:
        pair, concurrency = entry["pair"], entry["concurrency"]
        for side, cmp in entry["vs_raw"].items():
            if not side.startswith("chat"):
                continue
            if pair == "scripted":
                ratio = cmp["tokens_per_s_ratio"]
                if concurrency in (16, 64, 256) and ratio:
                    checks.append(_check(pair, side, f"tokens/s vs raw at concurrency {concurrency} >= 0.85x",
                                         ratio["median"], ratio["median"] >= 0.85))
                ttft = cmp["ttft_p50_ms_diff"]
                limit = {1: 1.5, 16: 10.0}.get(concurrency)
                if limit is not None and ttft:
                    raw_itl = entry["sides"]["raw"]["itl_p50_ms"]
                    bursty = bool(raw_itl and raw_itl["median"] < BURST_ITL_MS)
                    note = "not meaningful: raw streams arrive in one burst (ITL p50 < 0.1 ms)" if bursty else None
                    checks.append(_check(pair, side, f"added TTFT p50 at concurrency {concurrency} <= {limit:g} ms",
                                         ttft["median"], ttft["median"] <= limit, note))
                itl = cmp["itl_p50_ms_ratio"]
                if concurrency == 16 and itl:
                    checks.append(_check(pair, side, "ITL p50 vs raw at concurrency 16 <= 1.3x", itl["median"],
                                         itl["median"] <= 1.3))
                stub = entry["cpu_us_per_token"].get(side, {}).get(entry["models"][side])
                if concurrency == 64 and stub:
                    value = stub["median"]
                    checks.append(_check(pair, side, f"stub CPU per token at concurrency 64 <= {STUB_CPU_TARGET_US:g} µs",
                                         value, value <= STUB_CPU_TARGET_US))
        for side, cmp in entry["vs_vllm_serve"].items():
            ratio = cmp["tokens_per_s_ratio"]
            if concurrency == 64 and ratio:
                checks.append(_check(pair, side, "tokens/s vs vLLM's own server at concurrency 64 >= 1.0x",
                                     ratio["median"], ratio["median"] >= 1.0))
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
        return f"vLLM engine, tiny model (raw: `{args.raw_model}`)"
    return f"scripted fake engine, one token every {args.scripted_interval_ms:g} ms (raw: `{args.raw_scripted_model}`)"


def _sum_medians(*spreads) -> float | None:
    values = [s["median"] for s in spreads if s]
    return sum(values) if values else None


def comparison_cells(cmp: dict) -> list[str]:
    cells = []
    for _, key in COLUMNS:
        if key in LATENCY_KEYS:
            cells.append(fmt_latency_change(cmp[f"{key}_diff"], cmp[f"{key}_ratio"]))
        elif f"{key}_ratio" in cmp:
            cells.append(fmt_spread(cmp[f"{key}_ratio"], "x"))
        else:
            cells.append("")
    return cells


def markdown_report(summary: list[dict], checks: list[dict], args, profiles: list[dict] = (),
                    plot: str | None = None) -> str:
    lines = [
        f"# openai_chat vs raw generate_stream: {args.max_tokens} tokens per request, "
        f"medians of {args.repeats} runs (min-max)",
        "",
        "Paths: `raw` calls the generation model's `generate_stream` directly; `chat <transport>` is "
        "`openai_chat` reading it over that transport (`si=N`: the request's `stream_interval`); "
        f"`{VLLM_SERVE}` is vLLM's own OpenAI server on the same model and engine settings. "
        "chunks = events carrying generated text; the chat layer merges outputs that wait, so "
        "compare tokens/s too. ms/token = (last text event - first) / (tokens - 1) per request. "
        "Ratio rows: that path vs raw over paired runs; latencies as path - raw in ms (path/raw ratio).",
    ]
    if plot:
        lines += ["", f"![tokens/s and first-token latency against concurrency]({plot})"]
    for pair in args.paths:
        entries = [e for e in summary if e["pair"] == pair]
        if not entries:
            continue
        lines += ["", f"## {pair_title(pair, args)}", ""]
        lines.append("| conc | path | " + " | ".join(name for name, _ in COLUMNS) + " |")
        lines.append("|---|---|" + "---|" * len(COLUMNS))
        for e in entries:
            c = e["concurrency"]
            for side, stats in e["sides"].items():
                lines.append(f"| {c} | {side} | " + " | ".join(fmt_spread(stats[key]) for _, key in COLUMNS) + " |")
            for side, cmp in e["vs_raw"].items():
                lines.append(f"| {c} | **{side} / raw** | " + " | ".join(comparison_cells(cmp)) + " |")
            for side, cmp in e["vs_vllm_serve"].items():
                lines.append(f"| {c} | **{side} / {VLLM_SERVE}** | " + " | ".join(comparison_cells(cmp)) + " |")
    # Only when this script ran the server: otherwise the client's own CPU is all there is.
    cpu_rows = [e for e in summary if any(set(cpu) - {"bench client"} for cpu in e["cpu_us_per_token"].values())]
    if cpu_rows:
        lines += [
            "",
            "## CPU time per generated token (µs, medians), by process",
            "",
            "`chat stub`: the Python-backend stub of the path's chat model; `generation model`: the raw "
            "model's stub and the processes it started (the vLLM engine). Last column: CPU cores that "
            "processes outside this benchmark kept busy during the runs (max over runs); much above 0 "
            "means the figures are disturbed.",
            "",
            "| pair | conc | path | bench client | tritonserver | chat stub | generation model | "
            f"{VLLM_SERVE} | other processes (cores) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for e in cpu_rows:
            raw_model = e["models"]["raw"]
            for side, cpu in e["cpu_us_per_token"].items():
                stub = cpu.get(e["models"][side]) if side.startswith("chat") else None
                engine = _sum_medians(cpu.get(raw_model), cpu.get(f"{raw_model} children"))
                others = e["other_processes_cores"][side]
                cells = [_num(cpu["bench client"]["median"]) if cpu.get("bench client") else "-",
                         _num(cpu["tritonserver"]["median"]) if cpu.get("tritonserver") else "-",
                         _num(stub["median"]) if stub else "-", _num(engine),
                         _num(cpu[VLLM_SERVE]["median"]) if cpu.get(VLLM_SERVE) else "-",
                         _num(others["max"]) if others else "-"]
                lines.append(f"| {e['pair']} | {e['concurrency']} | {side} | " + " | ".join(cells) + " |")
    if profiles:
        lines += ["", "## Where the chat stub's CPU goes (py-spy, first run of the profiled level)", "",
                  "Stage shares of the stub's samples (tools/bench.py `STAGES`), and the same as µs per token "
                  "(the stub's CPU per token in that level, median, times the share).", "",
                  "| pair | path | conc | samples | " + " | ".join(stage for stage, _ in STAGES) + " | other |",
                  "|---|---|---|---|" + "---|" * (len(STAGES) + 1)]
        for profile in profiles:
            entry = next((e for e in summary if e["pair"] == profile["pair"]
                          and e["concurrency"] == profile["concurrency"]), None)
            stub = entry["cpu_us_per_token"].get(profile["side"], {}).get(profile["model"]) if entry else None
            cells = []
            for stage in [name for name, _ in STAGES] + ["other"]:
                share = profile["stages"].get(stage, 0.0)
                cells.append(f"{share:.0%}" + (f" ({share * stub['median']:.0f} µs)" if stub else ""))
            lines.append(f"| {profile['pair']} | {profile['side']} | {profile['concurrency']} | {profile['samples']} | "
                         + " | ".join(cells) + " |")
    if checks:
        lines += ["", "## Targets", ""]
        for check in checks:
            what = check["what"]
            value = (f"{check['value']:+.2f} ms" if what.endswith(" ms") else
                     f"{check['value']:.0f} µs" if "µs" in what else f"{check['value']:.2f}x")
            note = f" ({check['note']})" if check.get("note") else ""
            lines.append(f"- {'PASS' if check['ok'] else 'FAIL'} [{check['pair']}, {check['side']}] {what}: {value}{note}")
    return "\n".join(lines) + "\n"


def write_plot(summary: list[dict], args, path: Path) -> None:
    """Output tokens/s and first-token latency p50 against concurrency, one line per path (error
    bars: min-max over the repeats), one row per pair."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    pairs = [pair for pair in args.paths if any(e["pair"] == pair for e in summary)]
    figure, axes = plt.subplots(len(pairs), 2, figsize=(12, 4.5 * len(pairs)), squeeze=False)
    for row, pair in enumerate(pairs):
        entries = [e for e in summary if e["pair"] == pair]
        sides = list(dict.fromkeys(side for e in entries for side in e["sides"]))
        for column, (key, label) in enumerate((("tokens_per_s", "output tokens/s"), ("ttft_p50_ms", "TTFT p50 (ms)"))):
            ax = axes[row][column]
            for side in sides:
                points = [(e["concurrency"], e["sides"][side][key]) for e in entries
                          if side in e["sides"] and e["sides"][side][key]]
                if not points:
                    continue
                xs = [x for x, _ in points]
                ys = [p["median"] for _, p in points]
                errors = [[p["median"] - p["min"] for _, p in points], [p["max"] - p["median"] for _, p in points]]
                ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=side,
                            linestyle="--" if side == "raw" else "-")
            ax.set_xscale("log", base=2)
            ax.set_xticks(args.concurrency, [str(c) for c in args.concurrency])
            if key == "ttft_p50_ms":
                ax.set_yscale("log")
            ax.set_xlabel("concurrency (closed loop)")
            ax.set_ylabel(label)
            ax.set_title(f"{pair_title(pair, args)}".replace("`", ""), fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    figure.suptitle(f"openai_chat vs raw, {args.max_tokens} tokens per request, medians of {args.repeats} runs",
                    fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


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
    """The models the selected pairs need, as tests/conftest.py builds them: per pair the raw
    model and one chat model per transport."""
    from tools.repositories import add_chat_model, add_test_model, add_vllm_model  # noqa: PLC0415

    loopback = {"grpc_url": f"127.0.0.1:{grpc_port}", "http_url": f"127.0.0.1:{http_port}",
                **{key: str(value) for key, value in args.chat_parameter}}
    for pair in args.paths:
        if pair == "vllm":
            add_vllm_model(repo, args.raw_model, args.tokenizer, **dict(args.engine_arg))
            extra = {"target_model": args.raw_model}
        else:
            add_test_model(repo, args.raw_scripted_model, "scripted_vllm")
            extra = {"target_model": args.raw_scripted_model, "tokenizer": str(args.tokenizer),
                     "served_model_name": "scripted"}
        for transport in args.transports:
            chat_dir = add_chat_model(repo, chat_model_name(args, pair, transport), transport=transport,
                                      **extra, **loopback)
            count = args.bls_instances if transport == "bls" and args.bls_instances else args.instances
            set_instance_count(chat_dir / "config.pbtxt", count)
        for label, parameters in args.variant:
            transport = args.transports[0]
            chat_dir = add_chat_model(repo, variant_model_name(args, pair, label), transport=transport,
                                      **extra, **{**loopback, **parameters})
            set_instance_count(chat_dir / "config.pbtxt", args.instances)


def vllm_server_command(args, port: int) -> list[str]:
    """vLLM's own OpenAI server with the engine settings of `vllm_model` (tools/repositories.py)."""
    from tools.repositories import TINY_ENGINE_ARGS  # noqa: PLC0415

    engine = {**TINY_ENGINE_ARGS, **dict(args.engine_arg)}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(args.tokenizer),
               "--host", "127.0.0.1", "--port", str(port), "--no-enable-log-requests"]
    for key, value in engine.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value is not False:
            command += [flag, str(value)]
    return command


def start_vllm_server(args, out: Path):
    """vLLM's OpenAI server on a free port; returns the process and its URL."""
    import urllib.request  # noqa: PLC0415

    from tools.tritonlocal import free_port, server_env  # noqa: PLC0415

    port = free_port()
    log_path = out.with_name(out.stem + "-vllm-serve.log")
    with open(log_path, "wb") as server_log:
        process = subprocess.Popen(vllm_server_command(args, port), stdout=server_log, stderr=subprocess.STDOUT,
                                   env=server_env(), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    log(f"starting vLLM's OpenAI server (log: {log_path})")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(f"vLLM's server exited (log: {log_path})")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    log(f"vLLM's server ready at {url}")
                    return process, url
        except OSError:
            time.sleep(1)
    stop_process_group(process)
    raise BenchError(f"vLLM's server did not start (log: {log_path})")


def stop_process_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


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
    p.add_argument("--concurrency", type=_int_list, default=[1, 16, 64], help="levels, e.g. 1,16,64")
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
    p.add_argument("--stream-intervals", type=_int_list, default=[],
                   help="extra chat paths over the first transport whose requests set 'stream_interval', e.g. 4,16")
    p.add_argument("--variant", action="append", default=[], type=_variant,
                   help="an extra chat path over the first transport whose model has these config parameters, "
                        "LABEL:key=value[,key=value...], e.g. 'lanes2:responder_threads=2' (repeatable)")
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
    args = parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.tokenizer == DEFAULT_TOKENIZER.resolve():
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_model.py"), "--out", str(args.tokenizer)],
                       check=True, stdout=sys.stderr)
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


def report_header(args, started: str) -> str:
    """What the report file says about its run: when, what revision, the command line."""
    command = " ".join(sys.argv[1:]) if sys.argv[1:] else "(defaults)"
    return (f"<!-- written by tools/bench.py; started {started}, revision {git_revision()}, "
            f"{os.cpu_count()} CPUs; arguments: {command} -->\n")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        log(f"benchmark failed: {error}")
        sys.exit(1)
