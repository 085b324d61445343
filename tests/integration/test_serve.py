"""`make serve` (tools/serve.py) as users stop it: SIGTERM (docker stop, systemd, kill) and
Ctrl-C (SIGINT) stop the server, its model stubs and the vLLM engine processes, within a
bounded time, and exit with status 0."""

from __future__ import annotations

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


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_stops_everything_on_signal(tmp_path, tiny_model, signum):
    repository = tmp_path / "serve_repository"
    http_port = free_port()
    command = [sys.executable, str(ROOT / "tools" / "serve.py"), "--http-port", str(http_port),
               "--grpc-port", str(free_port()), "--metrics-port", str(free_port()), "--repository", str(repository)]
    # SIGINT as a terminal's Ctrl-C: a child of a non-interactive shell may inherit it ignored.
    serve = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert serve.poll() is None, serve.stdout.read().decode(errors="replace")[-3000:]
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
        serve.send_signal(signum)
        code = serve.wait(timeout=60)
        output = serve.stdout.read().decode(errors="replace")
        assert code == 0, output[-3000:]
        assert processes_mentioning(str(repository)) == []
        assert [p for p in children_of(serve.pid) if Path(f"/proc/{p}").exists()] == []
    finally:
        if serve.poll() is None:
            serve.kill()
