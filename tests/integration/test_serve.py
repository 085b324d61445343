"""`make serve` (tools/serve.py) as users stop it: SIGTERM (docker stop, systemd, kill) and
Ctrl-C (SIGINT) stop the server, its model stubs and the vLLM engine processes (with
`--inprocess`, also openai_chat's own engine), within a bounded time, and exit with status 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.repositories import ROOT
from harness.server import free_port

pytestmark = pytest.mark.integration


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def children_of(pid: int) -> list[int]:
    """Every descendant of `pid` (by /proc parent links), living or zombie."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        frontier += kids
    return found


SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}
# The Ctrl-C server also gives openai_chat its own engine (`make serve INPROCESS=1`): a signal must
# stop that engine's processes too, and the model must still answer before it.
INPROCESS = {"SIGINT": ["--inprocess"]}


def output(repository: Path, tail: int = 3000) -> str:
    return (repository.parent / "serve.log").read_text(errors="replace")[-tail:]


@pytest.fixture(scope="module")
def serves(tmp_path_factory, tiny_model):
    """One `make serve` per signal, started together (each spends its start mostly waiting on its
    engine): name -> (process, HTTP port, repository)."""
    started = {}
    for name in SIGNALS:
        repository = tmp_path_factory.mktemp(name) / "serve_repository"
        http_port = free_port()
        command = [sys.executable, str(ROOT / "tools" / "serve.py"), "--http-port", str(http_port),
                   "--grpc-port", str(free_port()), "--metrics-port", str(free_port()), "--repository", str(repository),
                   *INPROCESS.get(name, [])]
        # SIGINT as a terminal's Ctrl-C: a child of a non-interactive shell may inherit it ignored.
        with open(repository.parent / "serve.log", "wb") as log:
            serve = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        started[name] = (serve, http_port, repository)
    yield started
    for serve, _port, _repository in started.values():
        if serve.poll() is None:
            serve.kill()


@pytest.mark.parametrize("name", list(SIGNALS))
def test_serve_stops_everything_on_signal(serves, name):
    serve, http_port, repository = serves[name]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert serve.poll() is None, output(repository)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        pytest.fail("make serve did not become ready")
    started = processes_mentioning(str(repository))
    assert len(started) >= 3  # tritonserver and the stubs of its models
    if name in INPROCESS:
        body = json.dumps({"request": json.dumps({"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4})})
        with urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{http_port}/v2/models/openai_chat/generate", data=body.encode()), timeout=60) as r:
            answer = json.loads(json.loads(r.read())["response"])
        assert answer["choices"][0]["finish_reason"] == "length", answer
        assert "openai_chat ready: serves 'tiny-chat' via its own vLLM engine" in output(repository, 200_000)
    serve.send_signal(SIGNALS[name])
    code = serve.wait(timeout=60)
    assert code == 0, output(repository)
    assert processes_mentioning(str(repository)) == []
    assert [p for p in children_of(serve.pid) if Path(f"/proc/{p}").exists()] == []
