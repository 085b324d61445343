"""Metrics on Triton's metrics endpoint after known traffic, and the per-instance request limit."""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest

from tests.helpers import ChatClient, script, user

pytestmark = [pytest.mark.integration, pytest.mark.models("chat_metrics", "chat_capped")]


def scrape(triton) -> dict[str, float]:
    """`name{labels}` -> value for the `tritonchat_*` samples."""
    with urllib.request.urlopen(f"http://127.0.0.1:{triton.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("tritonchat_"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def sample(samples: dict[str, float], name: str, **labels) -> float:
    found = [value for key, value in samples.items()
             if key.split("{")[0] == name and all(f'{k}="{v}"' in key for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_metrics_after_known_traffic(triton):
    client = ChatClient(triton.http_url, "chat_metrics")
    done = script(chunks=["a", "b", "c"], prompt_tokens=7)
    for request in (user(done), {**user(done), "stream": True}, user(script(chunks=["x"], finish_reason="length", prompt_tokens=2))):
        assert client.create(request)[0] == 200 if not request.get("stream") else client.stream(request).error is None
    assert client.create({**user("x"), "temperature": "hot"})[0] == 400
    assert client.create({**user("x"), "model": "nope"})[0] in (400, 404)
    time.sleep(0.5)
    samples = scrape(triton)
    model = {"model": "chat_metrics"}
    assert sample(samples, "tritonchat_requests_total", outcome="completed", reason="stop", **model) == 2
    assert sample(samples, "tritonchat_requests_total", outcome="completed", reason="length", **model) == 1
    assert sample(samples, "tritonchat_requests_total", outcome="error", reason="invalid_request_error", **model) == 1
    assert sample(samples, "tritonchat_requests_total", outcome="error", reason="model_not_found", **model) == 1
    assert sample(samples, "tritonchat_prompt_tokens_total", **model) == 7 + 7 + 2
    assert sample(samples, "tritonchat_completion_tokens_total", **model) == 3 + 3 + 1
    assert sample(samples, "tritonchat_requests_in_flight", **model) == 0
    assert sample(samples, "tritonchat_time_to_first_token_seconds_count", **model) == 3
    assert 0 < sample(samples, "tritonchat_time_to_first_token_seconds_sum", **model) < 3
    assert sample(samples, "tritonchat_time_per_output_token_seconds_count", **model) == 2
    # first_token_stages: the one streamed request's first token by stage, within its time to first token
    stages = {stage: sample(samples, "tritonchat_first_token_stage_seconds_sum", stage=stage, **model)
              for stage in ("prepare", "wait", "handoff", "send")}
    assert all(sample(samples, "tritonchat_first_token_stage_seconds_count", stage=stage, **model) == 1
               for stage in stages)
    assert 0 < sum(stages.values()) < 3 and stages["wait"] > 0


def test_overload_is_refused_fast_and_the_rest_keep_their_latency(triton):
    """Twice `max_open_requests` (8) at once: 8 requests are refused with a 503 without queueing
    (each answered before any accepted one, which streams for 1 s, has finished); the 8 accepted
    take about as long as one alone."""
    client = ChatClient(triton.http_url, "chat_capped")
    request = {**user(script(chunks=[f"{i} " for i in range(10)], interval_ms=100)), "stream": True}
    alone_started = time.monotonic()
    assert client.stream(request).error is None
    alone = time.monotonic() - alone_started
    results: list = [None] * 16
    barrier = threading.Barrier(16)

    def run(i):
        barrier.wait()
        started = time.monotonic()
        result = ChatClient(triton.http_url, "chat_capped").stream(request)
        results[i] = (result, time.monotonic() - started)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    refused = [(r, s) for r, s in results if r.error is not None]
    served = [(r, s) for r, s in results if r.error is None]
    assert len(served) >= 8 and len(refused) == 16 - len(served) >= 6  # 16 arrive within a few ms
    for result, seconds in refused:
        assert result.error["error"]["code"] == "service_unavailable"
        assert seconds < min(s for _, s in served) / 2
    for result, seconds in served:
        assert result.content == "".join(f"{i} " for i in range(10))
        assert seconds < alone + 1.0
