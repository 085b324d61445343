"""The development harness's own rules (harness/): the environment a local server runs in."""

from __future__ import annotations

from harness.server import server_env


def test_the_cpu_engines_thread_binding_is_vllms_unless_set(monkeypatch):
    """vLLM's own binding ("auto") unless the environment sets one, which reaches the server."""
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert "VLLM_CPU_OMP_THREADS_BIND" not in server_env()
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    assert server_env()["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
