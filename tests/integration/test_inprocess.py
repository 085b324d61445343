"""The chat models with their own vLLM engine (`engine: inprocess`) through real tritonserver, on
the tiny model: what is particular to them. (What every chat model does, they do in the tests of
the `tiny` and `completions` fixtures, parametrized over them, and in test_vllm_differential.py.)

- `openai_chat_inprocess`: vllm_model's engine arguments and LoRA adapter, in its own directory;
- `chat_inprocess_spare`: another, whose engine these tests stop (finalize) and kill.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import requests

from harness.storm import server_answers, storm
from tests.helpers import ChatClient, stub_pid

pytestmark = [pytest.mark.integration, pytest.mark.models("openai_chat_inprocess")]

MODEL = "openai_chat_inprocess"
SPARE = "chat_inprocess_spare"
CONVERSATION = [{"role": "user", "content": "Tell me a long story about the river."}]


def long_request(**fields) -> dict:
    """Long enough to still be generating when the test gives it up (about 2 ms a token here)."""
    return {"messages": CONVERSATION, "max_completion_tokens": 1900, "ignore_eos": True, **fields}


def metric(triton, name: str, model: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{triton.metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + "{") and f'model="{model}"' in line:
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} for {model}")


def wait_for(condition, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def engine_processes(stub: int) -> list[int]:
    """The processes a stub started (vLLM's engine core, its worker, multiprocessing's tracker)."""
    found, todo = [], [stub]
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ready(triton, model: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{triton.http_url}/v2/models/{model}/ready", timeout=5) as r:
            return r.status == 200
    except (urllib.error.HTTPError, urllib.error.URLError):
        return False


class OpenStream:
    """A streamed request read until `chunks` events carried text; the response stays open. (Its
    lines are read from one iterator throughout: leaving a `requests` line iterator early closes
    the connection, which the server sees as a client that went away.)"""

    def __init__(self, triton, model: str, request: dict, chunks: int = 3):
        self.response = requests.post(f"http://{triton.http_url}/v2/models/{model}/generate_stream",
                                      json={"request": json.dumps({**request, "stream": True})}, stream=True,
                                      timeout=60)
        self.lines = self.response.iter_lines()
        seen = 0
        while seen < chunks:
            line = next(self.lines)
            if line.startswith(b"data: ") and b'\\"content\\":\\"' in line:
                seen += 1

    def events(self) -> list[dict]:
        """The rest of the stream's events, to its end."""
        return [json.loads(line[len(b"data: "):]) for line in self.lines if line.startswith(b"data: ")]

    def close(self) -> None:
        self.response.close()


# ---- the engine's own requests ---------------------------------------------------------------------


def test_a_dropped_stream_aborts_its_engine_request(triton):
    """The client goes away mid-stream: the engine request is aborted at once (the engine's
    requests, `vllm:num_requests_running`, back to 0 within a second), and the model keeps serving."""
    assert wait_for(lambda: metric(triton, "vllm:num_requests_running", MODEL) == 0, 5)
    response = OpenStream(triton, MODEL, long_request())
    assert wait_for(lambda: metric(triton, "vllm:num_requests_running", MODEL) == 1, 5)
    response.close()
    dropped = time.monotonic()
    assert wait_for(lambda: metric(triton, "vllm:num_requests_running", MODEL) == 0, 5)
    assert time.monotonic() - dropped < 1.0, "the engine still ran the request a second after the client left"
    status, body = ChatClient(triton.http_url, MODEL).create({"messages": CONVERSATION, "max_completion_tokens": 4})
    assert status == 200 and body["usage"]["completion_tokens"] == 4


def test_a_cancelled_whole_answer_aborts_its_engine_request(triton):
    """A whole (non-streamed) answer whose client goes away: aborted at the next cancellation check."""
    def ask():
        try:
            requests.post(f"http://{triton.http_url}/v2/models/{MODEL}/generate",
                          json={"request": json.dumps(long_request())}, timeout=0.5)
        except requests.exceptions.Timeout:
            pass  # the client gives up: its connection closes

    thread = threading.Thread(target=ask)
    thread.start()
    assert wait_for(lambda: metric(triton, "vllm:num_requests_running", MODEL) == 1, 5)
    thread.join()
    assert wait_for(lambda: metric(triton, "vllm:num_requests_running", MODEL) == 0, 5)


def test_a_stop_string_ends_the_engine_request(triton):
    """vLLM ends the request at a stop string itself; nothing is left running."""
    client = ChatClient(triton.http_url, MODEL)
    _, body = client.create({"messages": CONVERSATION, "temperature": 0, "max_completion_tokens": 24,
                             "ignore_eos": True})
    text = body["choices"][0]["message"]["content"]
    stop = next(text[i:i + 3] for i in range(6, len(text) - 3) if text[i:i + 3].strip())
    result = client.stream({"messages": CONVERSATION, "temperature": 0, "max_completion_tokens": 24,
                            "ignore_eos": True, "stop": [stop], "stream": True})
    assert result.content == text[:text.index(stop)]
    assert result.chunks[-1]["choices"][0]["finish_reason"] == "stop"
    # (the gauge is reported at most every RUNNING_REPORT_S, so it is read until it settles)
    assert wait_for(lambda: metric(triton, "vllm:num_requests_running", MODEL) == 0, 5)


def test_a_storm_of_dropped_streams_leaves_nothing_running(triton, server_log):
    """200 streams at concurrency 32, each dropped after 0-10 chunks: every engine request is
    aborted (back to 0 within a second of the storm's end), no request stays in flight, the model
    answers, and nothing is logged at error level."""
    body = json.dumps({"request": json.dumps({
        "messages": CONVERSATION, "stream": True, "max_completion_tokens": 64, "ignore_eos": True})}).encode()
    log_start = server_log.stat().st_size
    result = asyncio.run(storm(triton.http_url, MODEL, streams=200, concurrency=32, max_tokens=64,
                               max_events=10, complete_fraction=0.0, seed=31, timeout=120, body=body))
    assert set(result["outcomes"]) <= {"dropped", "completed"}, result
    ended = time.monotonic()
    assert wait_for(lambda: metric(triton, "vllm:num_requests_running", MODEL) == 0, 5)
    assert time.monotonic() - ended < 1.0, "the engine still ran requests a second after the storm"
    assert wait_for(lambda: metric(triton, "tritonchat_requests_in_flight", MODEL) == 0, 5)
    assert server_answers(triton.http_url, MODEL)
    with open(server_log, "rb") as log:
        log.seek(log_start)
        lines = log.read().decode(errors="replace").splitlines()
    assert [line for line in lines if line.startswith("E") or "Traceback" in line or ":ERROR:" in line] == []


def test_no_second_model_and_no_loopback_call(triton):
    """The model reads its own engine: it started the engine's processes, and it holds no
    connection to the server's own endpoints."""
    from harness.server import tcp_connections  # noqa: PLC0415

    stub = stub_pid(triton, MODEL)
    assert any("python" in command(pid) for pid in engine_processes(stub))
    ChatClient(triton.http_url, MODEL).stream({"messages": CONVERSATION, "max_completion_tokens": 8, "stream": True})
    assert tcp_connections(stub, triton.http_port) == 0
    assert tcp_connections(stub, triton.grpc_port) == 0


# ---- finalize, and an engine that dies ---------------------------------------------------------------


def test_unloading_shuts_the_engine_down(triton, server_log):
    """Finalize stops the engine: the unload takes seconds, not the stub's exit timeout, and
    leaves none of its processes."""
    triton.load(SPARE)
    stub = stub_pid(triton, SPARE)
    started = engine_processes(stub)
    assert started
    status, _ = ChatClient(triton.http_url, SPARE).create({"messages": CONVERSATION, "max_completion_tokens": 4})
    assert status == 200
    begun = time.monotonic()
    triton.unload(SPARE)
    took = time.monotonic() - begun
    assert took < 20, f"unloading took {took:.1f} s"
    assert wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in [stub, *started]), 10), \
        [command(pid) for pid in [stub, *started]]
    assert f"successfully unloaded '{SPARE}'" in server_log.read_text(errors="replace")


def test_a_dead_engine_fails_requests_with_503_and_the_model_stops_being_ready(triton, server_log):
    """The engine core is killed mid-stream: the open stream ends with a 503 at once (no hang), and
    the model unloads itself (explicit model control), as Triton's vLLM backend does for an
    unhealthy engine, leaving no process behind."""
    triton.load(SPARE)
    stub = stub_pid(triton, SPARE)
    response = OpenStream(triton, SPARE, long_request())
    cores = [pid for pid in engine_processes(stub) if "EngineCore" in Path(f"/proc/{pid}/comm").read_text()
             or "EngineCore" in command(pid)]
    if not cores:  # vLLM names its engine-core process; fall back to the stub's first child
        cores = [pid for pid in engine_processes(stub) if "python" in command(pid)
                 and "resource_tracker" not in command(pid)][:1]
    assert cores, [command(pid) for pid in engine_processes(stub)]
    killed = time.monotonic()
    os.kill(cores[0], signal.SIGKILL)
    events = response.events()
    response.close()
    assert time.monotonic() - killed < 10
    error = json.loads(events[-1]["error"])["error"]
    assert error["code"] == "service_unavailable" and "engine" in error["message"], error
    assert wait_for(lambda: not ready(triton, SPARE), 30, interval=0.2), "the model is still ready"
    triton.loaded.discard(SPARE)
    assert wait_for(lambda: not Path(f"/proc/{stub}").exists(), 30, interval=0.2)
    log = server_log.read_text(errors="replace")
    assert f"{SPARE}: its vLLM engine died (exit codes [-9]); the model is being unloaded" in log
    assert f"successfully unloaded '{SPARE}'" in log
