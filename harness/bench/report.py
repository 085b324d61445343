"""The report of a run: the project's targets, the markdown tables (medians with their min-max
spread, ratios against raw and against vLLM's own server, CPU per token by process, the stub's
stage shares) and the plot (output tokens/s and first-token latency against concurrency).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness import ROOT
from harness.bench.measure import LATENCY_KEYS
from harness.bench.paths import INPROCESS, VLLM_SERVE
from harness.bench.profile import STAGES


# ---- the project's targets ----------------------------------------------------------------------


BURST_ITL_MS = 0.1  # inter-token gaps this small mean whole streams arrive at once
STUB_CPU_TARGET_US = 80.0
# `chat inprocess` (engine: inprocess) against the raw vLLM model and vLLM's own server.
INPROCESS_VS_RAW = 1.0
INPROCESS_VS_SERVE = 0.9
INPROCESS_TTFT_MS = 2.0
INPROCESS_CPU_VS_SERVE = 1.2


def server_cpu_us(entry: dict, side: str) -> float | None:
    """All the server-side CPU per token of a path (medians summed): tritonserver, the chat stub and
    the generation model's processes (the raw model's stub and engine, or for `chat inprocess`
    the processes its own stub started); for vLLM's own server, its whole process tree."""
    if side not in entry["models"]:
        return None
    cpu = entry["cpu_us_per_token"].get(side, {})
    if side == VLLM_SERVE:
        return cpu[VLLM_SERVE]["median"] if cpu.get(VLLM_SERVE) else None
    model, raw_model = entry["models"][side], entry["models"]["raw"]
    stub = cpu.get(model) if side.startswith("chat") else None
    if side == INPROCESS:
        engine = _sum_medians(cpu.get(f"{model} children"))
    else:
        engine = _sum_medians(cpu.get(raw_model), cpu.get(f"{raw_model} children"))
    return _sum_medians(cpu.get("tritonserver"), stub, {"median": engine} if engine is not None else None)


def _inprocess_checks(entry: dict) -> list[dict]:
    """`chat inprocess`: tokens/s >= 1.0x raw and >= 0.9x vLLM's own server at 16 and 64, first
    token p50 at 1 at most 2 ms after vLLM's own server's, server CPU per token <= 1.2x its own."""
    pair, concurrency, checks = entry["pair"], entry["concurrency"], []
    raw = entry["vs_raw"].get(INPROCESS, {}).get("tokens_per_s_ratio")
    if concurrency in (16, 64) and raw:
        checks.append(_check(pair, INPROCESS, f"tokens/s vs raw at concurrency {concurrency} >= "
                             f"{INPROCESS_VS_RAW:.1f}x", raw["median"], raw["median"] >= INPROCESS_VS_RAW))
    serve = entry["vs_vllm_serve"].get(INPROCESS, {})
    if concurrency in (16, 64) and serve.get("tokens_per_s_ratio"):
        ratio = serve["tokens_per_s_ratio"]["median"]
        checks.append(_check(pair, INPROCESS, f"tokens/s vs vLLM's own server at concurrency {concurrency} >= "
                             f"{INPROCESS_VS_SERVE:.1f}x", ratio, ratio >= INPROCESS_VS_SERVE))
    if concurrency == 1 and serve.get("ttft_p50_ms_diff"):
        diff = serve["ttft_p50_ms_diff"]["median"]
        checks.append(_check(pair, INPROCESS, f"TTFT p50 vs vLLM's own server at concurrency 1 <= "
                             f"+{INPROCESS_TTFT_MS:g} ms", diff, diff <= INPROCESS_TTFT_MS))
    ours, theirs = server_cpu_us(entry, INPROCESS), server_cpu_us(entry, VLLM_SERVE)
    if concurrency in (16, 64) and ours and theirs:
        checks.append(_check(pair, INPROCESS, f"server CPU per token vs vLLM's own server at concurrency "
                             f"{concurrency} <= {INPROCESS_CPU_VS_SERVE:.1f}x", ours / theirs,
                             ours / theirs <= INPROCESS_CPU_VS_SERVE))
    return checks


def _check(pair: str, side: str, what: str, value: float | None, ok: bool, note: str | None = None) -> dict:
    return {"pair": pair, "side": side, "what": what, "value": value, "ok": ok, "note": note}


def check_targets(summary: list[dict]) -> list[dict]:
    """The targets of the chat layer, on the scripted fixed-rate engine (each chat side vs raw,
    in the same run): tokens/s >= 0.85x raw at 16, 64 and 256; added TTFT p50 <= 1.5 ms at 1 and
    <= 10 ms at 16; ITL p50 <= 1.3x raw at 16; CPU in the chat model's stub <= 80 µs per token (at
    64). On the vLLM pair: chat tokens/s at or above vLLM's own server at 64; for `chat inprocess`
    its own targets (`_inprocess_checks`)."""
    checks = []
    for entry in summary:
        pair, concurrency = entry["pair"], entry["concurrency"]
        checks += _inprocess_checks(entry)
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
            if concurrency == 64 and ratio and side != INPROCESS:
                checks.append(_check(pair, side, "tokens/s vs vLLM's own server at concurrency 64 >= 1.0x",
                                     ratio["median"], ratio["median"] >= 1.0))
    return checks


# ---- the report ---------------------------------------------------------------------------------


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


def run_line(run: dict) -> str:
    """One run in one line, as the benchmark logs it."""
    m = run["metrics"]
    line = (
        f"{_num(m['chunks_per_s'])} chunks/s, {_num(m['tokens_per_s'])} tokens/s, "
        f"TTFT p50 {_num(m['ttft_p50_ms'])} ms, ITL p50 {_num(m['itl_p50_ms'])} ms, {_num(m['wall_s'])} s"
    )
    others = run["other_processes_cores"]
    return line + (f" (other processes: {others:.2f} cores)" if others is not None else "")


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
            "`chat stub`: the Python-backend stub of the path's chat model (for `chat inprocess` with "
            "its engine's front end: output processing, detokenizing); `generation model`: the raw "
            "model's stub and the processes it started (the vLLM engine), for `chat inprocess` the "
            "engine processes its own stub started; `server total`: what the path's server processes "
            "used together (for `vllm serve`, its own tree). Last column: CPU cores that "
            "processes outside this benchmark kept busy during the runs (max over runs); much above 0 "
            "means the figures are disturbed.",
            "",
            "| pair | conc | path | bench client | tritonserver | chat stub | generation model | "
            f"{VLLM_SERVE} | server total | other processes (cores) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for e in cpu_rows:
            raw_model = e["models"]["raw"]
            for side, cpu in e["cpu_us_per_token"].items():
                model = e["models"][side]
                stub = cpu.get(model) if side.startswith("chat") else None
                engine = (_sum_medians(cpu.get(f"{model} children")) if side == INPROCESS
                          else _sum_medians(cpu.get(raw_model), cpu.get(f"{raw_model} children")))
                others = e["other_processes_cores"][side]
                cells = [_num(cpu["bench client"]["median"]) if cpu.get("bench client") else "-",
                         _num(cpu["tritonserver"]["median"]) if cpu.get("tritonserver") else "-",
                         _num(stub["median"]) if stub else "-", _num(engine),
                         _num(cpu[VLLM_SERVE]["median"]) if cpu.get(VLLM_SERVE) else "-",
                         _num(server_cpu_us(e, side)),
                         _num(others["max"]) if others else "-"]
                lines.append(f"| {e['pair']} | {e['concurrency']} | {side} | " + " | ".join(cells) + " |")
    lines += first_token_section(summary)
    if profiles:
        lines += ["", "## Where the chat stub's CPU goes (py-spy, first run of the profiled level)", "",
                  "Stage shares of the stub's samples (harness/bench/profile.py `STAGES`), and the same as µs per token "
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


def first_token_section(summary: list[dict]) -> list[str]:
    """At concurrency 1, each chat path's first token by stage (means over a run's requests, as
    the chat model reports them: `tritonchat_first_token_stage_seconds`; medians over the runs):
    what the chat layer adds to the engine's own first token, and where."""
    entries = [e for e in summary if e["concurrency"] == 1 and e.get("first_token_stages_ms")]
    if not entries:
        return []
    lines = ["", "## First token at concurrency 1, by stage (ms; means per run, medians over runs)", "",
             "`prepare`: from the request's arrival in the chat model to its calls built (parsing, the "
             "template, tokenizing); `wait`: to the first event of the generation model (the loopback request "
             "and the engine's own first token; for `chat inprocess` the engine's first output); `beyond raw`: "
             "`wait` minus raw's mean first-token time seen by the client (what the loopback itself adds; not "
             "shown where raw's streams arrive in one burst, as on the CPU vLLM engine on two cores: there the "
             "chat stub sends its first chunk within milliseconds, and the client receives it with the last); "
             "`handoff`: to the sender's lane; `send`: its chunks built and sent. `added`: the path's TTFT "
             "p50 minus raw's, as the client sees it.", "",
             "| pair | path | prepare | wait | beyond raw | handoff | send | added |",
             "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        raw_ttft = (e.get("ttft_mean_ms") or {}).get("raw")
        raw_itl = e["sides"]["raw"]["itl_p50_ms"]
        if raw_itl and raw_itl["median"] < BURST_ITL_MS:
            raw_ttft = None
        for side, stages in e["first_token_stages_ms"].items():
            wait = stages.get("wait")
            beyond = wait["median"] - raw_ttft["median"] if wait and raw_ttft else None
            added = e["vs_raw"].get(side, {}).get("ttft_p50_ms_diff")
            cells = [fmt_spread(stages.get(stage)) for stage in ("prepare", "wait")]
            cells += [f"{beyond:+.2f}" if beyond is not None else "-"]
            cells += [fmt_spread(stages.get(stage)) for stage in ("handoff", "send")]
            cells += [f"{added['median']:+.2f}" if added else "-"]
            lines.append(f"| {e['pair']} | {side} | " + " | ".join(cells) + " |")
    return lines


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


# ---- what the report file says about its run ---------------------------------------------------


def git_revision() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "src", "model_repository"], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def report_header(args, started: str) -> str:
    """What the report file says about its run: when, what revision, the command line."""
    command = " ".join(sys.argv[1:]) if sys.argv[1:] else "(defaults)"
    return (f"<!-- written by tools/bench.py; started {started}, revision {git_revision()}, "
            f"{os.cpu_count()} CPUs; arguments: {command} -->\n")
