"""The benchmark of `openai_chat` against the generation model it calls (`make bench`,
tools/bench.py), and the parts other tools share (tools/bench_gateway.py, tools/soak.py,
tools/fuzz.py).

    paths.py       the paths compared and the requests each sends (rendered as `openai_chat` does)
    load.py        the streaming load generator (a closed loop) and what each request saw
    measure.py     statistics (percentiles, spreads, paired comparisons, summaries), CPU accounting
    profile.py     py-spy samples of a chat stub, grouped into stages by file
    servers.py     model repositories and the servers of a run (tritonserver, vLLM's own server)
    runner.py      `Bench`: the runs of every path at every level, interleaved
    report.py      the project's targets, the markdown report, the plot
    cli.py         tools/bench.py: options, orchestration, the results file
    token_path.py  the per-token micro-benchmark without a server (tools/bench_token_path.py)
"""

from __future__ import annotations

import sys


class BenchError(RuntimeError):
    """The benchmark cannot give a valid result (an error response, wrong token count...)."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
