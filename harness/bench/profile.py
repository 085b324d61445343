"""Profiles of a chat model's stub: py-spy samples during a run, grouped into stages by file.

`--profile 'PATH@CONCURRENCY'` samples that path's chat stub during its first run there: the
stage shares (receive, parse, build, send, ...) go into the report, the stacks next to the
JSON. For a stream that stays silent, the stacks of the stuck model's stub are saved too.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.bench import log

if TYPE_CHECKING:
    from harness.bench.load import Target
    from harness.bench.measure import ProcessCpu

PY_SPY = Path(sys.executable).with_name("py-spy")
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


# ---- samples (pure) -----------------------------------------------------------------------------


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


# ---- py-spy on the stubs of a running server ----------------------------------------------------


def dump_stacks(cpu: ProcessCpu, model: str, out: Path) -> list[str]:
    """Python and native stacks of the model's stub processes (needs py-spy), for a stuck server;
    the files are written next to `out`."""
    if not PY_SPY.exists():
        return []
    cpu.snapshot()
    files = []
    for pid in cpu.pids(model):
        path = out.with_name(f"{out.stem}-stuck-{model}-{pid}.txt")
        with open(path, "w") as f:
            subprocess.run([str(PY_SPY), "dump", "--native", "--pid", str(pid)], stdout=f, stderr=subprocess.STDOUT,
                           timeout=60, check=False)
        files.append(str(path))
    return files


def start_recording(cpu: ProcessCpu, target: Target, concurrency: int, out: Path) -> dict | None:
    """py-spy sampling the stub processes of the target's model until `finish_recording`."""
    cpu.snapshot()
    pids = cpu.pids(target.model)
    if not PY_SPY.exists() or not pids:
        log(f"cannot profile {target.model}: " + ("no py-spy" if not PY_SPY.exists() else "no stub process found"))
        return None
    stem = f"{out.stem}-profile-{target.pair}-{target.side.replace(' ', '_')}-c{concurrency}"
    recorders = []
    for pid in pids:
        path = out.with_name(f"{stem}-{pid}.collapsed")
        # --nonblocking: the stub is not paused to be sampled (the figures stay those of a normal run).
        command = [str(PY_SPY), "record", "--pid", str(pid), "--rate", str(PROFILE_RATE_HZ), "--format", "raw",
                   "--nonblocking", "--duration", "3600", "--output", str(path)]
        recorders.append((subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), path))
    time.sleep(0.5)  # py-spy attaches
    return {"target": target, "concurrency": concurrency, "stem": stem, "recorders": recorders}


def finish_recording(recording: dict, out: Path) -> dict:
    """Stops the samplers, writes the profile's text report next to `out`; returns the profile
    as the results file and the report hold it."""
    samples: dict[str, int] = {}
    for process, path in recording["recorders"]:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        if path.exists():
            for stack, count in read_collapsed(path.read_text()).items():
                samples[stack] = samples.get(stack, 0) + count
    target, concurrency = recording["target"], recording["concurrency"]
    stages = stage_shares(samples)
    text = profile_report(samples, stages, f"{target.model} ({target.side}) at concurrency {concurrency}")
    path = out.with_name(recording["stem"] + ".txt")
    path.write_text(text)
    log(f"profile of {target.model} at concurrency {concurrency}: {path}")
    return {"pair": target.pair, "side": target.side, "model": target.model, "concurrency": concurrency,
            "samples": sum(samples.values()), "stages": stages, "report": str(path),
            "collapsed": [str(p) for _, p in recording["recorders"]]}
