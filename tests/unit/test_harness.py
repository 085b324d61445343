"""The development harness's own rules (harness/): the environment a local server runs in."""

from __future__ import annotations

from harness.server import server_env


def test_the_cpu_engine_is_not_pinned_unless_asked(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert server_env()["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    assert server_env()["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
