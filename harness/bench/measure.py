"""What a run measured: statistics of the requests (pure) and the CPU time of the servers.

Per request: time to the first event carrying generated text (TTFT), gaps between
text-carrying events (ITL), how many such events (chunks) and tokens. Per (pair, concurrency):
each path's medians with their min-max spread over the repeats, and each path against raw (and
against vLLM's own server) over paired runs (repeat i of each).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from harness.bench.load import RequestResult
from harness.bench.paths import VLLM_SERVE
from tritonchat.sender import FIRST_TOKEN_STAGES

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


# ---- statistics (pure) -------------------------------------------------------------------------


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


def to_ms(seconds: float | None) -> float | None:
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
        "ttft_p50_ms": to_ms(percentile(ttfts, 50)),
        "ttft_p99_ms": to_ms(percentile(ttfts, 99)),
        "first_event_p50_ms": to_ms(percentile(first_events, 50)),
        "itl_p50_ms": to_ms(percentile(gaps, 50)),
        "itl_p99_ms": to_ms(percentile(gaps, 99)),
        "tpot_p50_ms": to_ms(percentile(tpots, 50)),
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
            entry["first_token_stages_ms"] = {
                side: {stage: spread(r["first_token_stages_ms"][stage] for r in found
                                     if r.get("first_token_stages_ms")) for stage in FIRST_TOKEN_STAGES}
                for side, found in level.items() if any(r.get("first_token_stages_ms") for r in found)
            }
            entry["ttft_mean_ms"] = {side: spread(r.get("ttft_mean_ms") for r in found) for side, found in level.items()}
            entry["other_processes_cores"] = {
                side: spread(r.get("other_processes_cores") for r in found) for side, found in level.items()
            }
            summary.append(entry)
    return summary


# ---- the chat models' first-token stages (Triton's metrics endpoint) -----------------------------

STAGE_METRIC = "tritonchat_first_token_stage_seconds"


def scrape_stages(metrics_url: str) -> dict[tuple[str, str], tuple[float, float]]:
    """Per (model, stage) the sum (seconds) and count of `tritonchat_first_token_stage_seconds`
    (the chat models report it with `first_token_stages`); empty when the endpoint cannot be read."""
    import urllib.request  # noqa: PLC0415

    try:
        with urllib.request.urlopen(metrics_url, timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    found: dict[tuple[str, str], list[float]] = {}
    for line in text.splitlines():
        if not line.startswith(STAGE_METRIC + "_"):
            continue
        name, _, rest = line.partition("{")
        labels_text, _, value = rest.rpartition("} ")
        labels = dict(part.split("=", 1) for part in labels_text.split(",") if "=" in part)
        key = (labels.get("model", "").strip('"'), labels.get("stage", "").strip('"'))
        slot = found.setdefault(key, [0.0, 0.0])
        if name == STAGE_METRIC + "_sum":
            slot[0] = float(value)
        elif name == STAGE_METRIC + "_count":
            slot[1] = float(value)
    return {key: (total, count) for key, (total, count) in found.items()}


def stage_means_ms(before: dict, after: dict, model: str) -> dict[str, float] | None:
    """The mean of each first-token stage over a run's requests (ms), from two scrapes."""
    means = {}
    for stage in FIRST_TOKEN_STAGES:
        total, count = after.get((model, stage), (0.0, 0.0))
        total0, count0 = before.get((model, stage), (0.0, 0.0))
        if count - count0 <= 0:
            return None
        means[stage] = 1000.0 * (total - total0) / (count - count0)
    return means


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
