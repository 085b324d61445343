"""Clients that disconnect, by the thousand: the server and every model stay up, over every
transport.

On Triton 2.51 (the local server) cancelling the loopback `ModelStreamInfer` calls of the gRPC
transport under such a storm aborted tritonserver (`GRPC_CALL_ERROR_TOO_MANY_OPERATIONS`, `prior >
0`, SIGSEGV); the gRPC transport drains those calls instead (see transports/grpc.py), and the
HTTP transport (the default) cancels by closing its connection, which Triton survives.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import script, stub_pid
from harness.server import tcp_connections
from harness.storm import server_answers, storm

pytestmark = [
    pytest.mark.integration,
    pytest.mark.models(
        "chat_scripted", "chat_scripted_grpc", "chat_scripted_bls", "openai_chat",
    ),
]

CRASH_MARKERS = ("Signal (", "ASSERTION FAILED", "is not healthy")


@pytest.mark.parametrize(("model", "tokens"), [("chat_scripted", 64), ("chat_scripted_grpc", 64), ("chat_scripted_bls", 8)])
def test_a_storm_of_dropped_streams_leaves_the_server_serving(triton, server_log, model, tokens):
    """1,000 streams at concurrency 64 (64 tokens 1 ms apart; 8 over BLS, which reads one stream
    at a time per instance), each dropped after 0-20 chunks or after up to 50 ms (often before
    its first response)."""
    request = {
        "messages": [{"role": "user", "content": script(repeat={"text": "tok ", "count": tokens}, interval_ms=1)}],
        "stream": True,
    }
    body = json.dumps({"request": json.dumps(request)}).encode()
    log_start = server_log.stat().st_size
    result = asyncio.run(
        storm(triton.http_url, model, streams=1000, concurrency=64, max_tokens=tokens, max_events=20,
              complete_fraction=0.0, seed=11, timeout=60, body=body, timed_fraction=0.3, max_drop_s=0.05)
    )
    # A stream whose chunks were merged (a busy instance sends fewer, larger ones) may end
    # before its client meant to drop it; none may fail or hang.
    outcomes = result["outcomes"]
    assert set(outcomes) <= {"dropped", "completed"}, result
    assert outcomes["dropped"] >= 500, result
    assert server_answers(triton.http_url, model), "the model no longer answers after the storm"
    with open(server_log, "rb") as log:
        log.seek(log_start)
        new_lines = log.read().decode(errors="replace")
    for marker in CRASH_MARKERS:
        assert marker not in new_lines
    assert triton.process.poll() is None


@pytest.mark.parametrize("model", ["chat_scripted", "chat_scripted_grpc", "chat_scripted_bls"])
def test_normal_traffic_logs_no_error(triton, server_log, model):
    """300 ordinary streams at concurrency 32: nothing in the server log at error level (the
    2.51 stub logged "Cannot remove future from background" errors for async `execute`)."""
    request = {
        "messages": [{"role": "user", "content": script(repeat={"text": "tok ", "count": 32}, interval_ms=1)}],
        "stream": True,
    }
    body = json.dumps({"request": json.dumps(request)}).encode()
    log_start = server_log.stat().st_size
    result = asyncio.run(
        storm(triton.http_url, model, streams=300, concurrency=32, max_tokens=32, max_events=0,
              complete_fraction=1.0, seed=3, timeout=60, body=body)
    )
    assert result["outcomes"] == {"completed": 300}, result
    with open(server_log, "rb") as log:
        log.seek(log_start)
        new_lines = log.read().decode(errors="replace").splitlines()
    errors = [line for line in new_lines if line.startswith("E") or "Traceback" in line or ":ERROR:" in line]
    assert errors == []


def _threads_and_fds(pid: int) -> tuple[int, int]:
    status = Path(f"/proc/{pid}/status").read_text()
    threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    return threads, len(list(Path(f"/proc/{pid}/fd").iterdir()))


def _metric(triton, name: str, model: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{triton.metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{") and f'model="{model}"' in line:
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} for {model}")


def test_a_storm_on_the_engine_cancels_its_work_and_leaks_nothing(triton):
    """Dropped streams on the real vLLM engine (default HTTP transport): the engine's running
    requests are back to 0 within a second of each storm's end, and once the stub's idle loopback
    connections have closed (`http_keepalive_s`, 2 s here; aiohttp sweeps them every that long, so
    one can live up to twice that) it is back, after the second storm, to the threads and open
    files it had after the first (which grew its thread pools)."""
    body = json.dumps({"request": json.dumps({
        "messages": [{"role": "user", "content": "Tell me a long story."}], "stream": True,
        "max_completion_tokens": 64, "ignore_eos": True})}).encode()
    stub = stub_pid(triton, "openai_chat")
    settled = []
    for seed in (21, 22):
        result = asyncio.run(storm(triton.http_url, "openai_chat", streams=200, concurrency=32, max_tokens=64,
                                   max_events=10, complete_fraction=0.0, seed=seed, timeout=120, body=body))
        assert set(result["outcomes"]) <= {"dropped", "completed"}, result
        ended = time.monotonic()
        while _metric(triton, "vllm:num_requests_running", "vllm_model") > 0 and time.monotonic() - ended < 5:
            time.sleep(0.05)
        assert _metric(triton, "vllm:num_requests_running", "vllm_model") == 0
        assert time.monotonic() - ended < 1.0, "the engine still ran requests a second after the storm"
        while _metric(triton, "tritonchat_requests_in_flight", "openai_chat") > 0 and time.monotonic() - ended < 5:
            time.sleep(0.05)
        assert _metric(triton, "tritonchat_requests_in_flight", "openai_chat") == 0
        while tcp_connections(stub, triton.http_port) and time.monotonic() - ended < 30:
            time.sleep(0.2)
        assert tcp_connections(stub, triton.http_port) == 0, "idle loopback connections stayed open"
        if not settled:
            settled.append(_threads_and_fds(stub))
            continue
        threads_a, fds_a = settled[0]
        while time.monotonic() - ended < 30:
            threads_b, fds_b = _threads_and_fds(stub)
            if threads_b <= threads_a and fds_b <= fds_a + 2:
                break
            time.sleep(0.5)
        settled.append((threads_b, fds_b))
        assert threads_b <= threads_a and fds_b <= fds_a + 2, settled
