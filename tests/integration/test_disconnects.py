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

import pytest

from tests.helpers import script
from tools.storm import server_answers, storm

pytestmark = pytest.mark.integration

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
