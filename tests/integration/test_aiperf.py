"""NVIDIA's AIPerf measures `openai_chat` unchanged (tools/bench_aiperf.py, `make bench-aiperf`):
through Triton's generate_stream with its template endpoint reading `text_output`, and through
the gateway with its chat endpoint; its output token counts must equal the server's usage.

AIPerf counts tokens by re-tokenizing the text it received, so the generation model here is
the scripted stand-in emitting one word that is one token of the tiny tokenizer (" and"):
then the text round-trips exactly and any lost, doubled or misread text shows as a
difference. (With the tiny model's random output, decoding and re-encoding do not round-trip,
so the counts differ for reasons of the tokenizer, not of the serving path.)"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import script
from harness.aiperf import VENV, aiperf

pytestmark = [pytest.mark.integration, pytest.mark.models("chat_text_output")]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def aiperf_environment():
    """AIPerf's environment (made once, in build/aiperf-venv), made in the background: requested
    before `triton`, it is installed while the server starts."""
    thread = threading.Thread(target=aiperf, daemon=True)
    thread.start()
    return thread


def test_aiperf_token_counts_agree_with_the_servers_usage(aiperf_environment, triton, tiny_model, tmp_path):
    aiperf_environment.join(timeout=900)
    assert (VENV / "bin" / "aiperf").exists(), "AIPerf's environment could not be made"
    requests, tokens = 8, 12
    prompts = tmp_path / "prompts.jsonl"
    line = script(repeat={"text": " and", "count": tokens}, interval_ms=2) + "\nHello"
    prompts.write_text("\n".join(json.dumps({"text": f"{line} {i}"}) for i in range(requests)) + "\n")
    command = [
        sys.executable, str(ROOT / "tools" / "bench_aiperf.py"),
        "--url", triton.http_url, "--metrics-url", f"127.0.0.1:{triton.metrics_port}",
        "--triton-model", "chat_text_output", "--served-model-name", "scripted", "--model", str(tiny_model),
        "--input-file", str(prompts),
        "--requests", str(requests), "--concurrency", "2", "--output-tokens", str(tokens),
        "--artifacts", str(tmp_path / "aiperf"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "aiperf" / "summary.json").read_text())
    assert set(summary) == {"generate_stream (template endpoint)", "gateway (chat endpoint)"}
    for name, run in summary.items():
        assert run["requests"] == requests, (name, run)
        assert run["output_tokens_server"] == requests * tokens, (name, run)
        assert run["output_tokens_aiperf"] == run["output_tokens_server"], (name, run)
    assert "| generate_stream (template endpoint) | 96.0 / 96.0 |" in result.stdout
