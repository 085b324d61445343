"""Faults of the generation model, on a server of their own (explicit model control): unloaded,
its stub killed with SIGKILL. The client gets an OpenAI error and the end of its stream within a
bound, `openai_chat` stays healthy, and once the model is back the next request succeeds."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request

import pytest
import requests

from tests.helpers import ChatClient, iter_sse, script, stub_pid, user
from harness.repositories import add_chat_model, add_test_model
from harness.server import TritonServer, free_port

pytestmark = pytest.mark.integration

TRANSPORTS = ("http", "grpc", "bls")


def scripted_server(repo, log, tiny_model, exit_timeout_s: int = 10) -> TritonServer:
    """A server of the scripted model and a chat model in front of it over each transport."""
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    add_test_model(repo, "scripted_vllm")
    for transport in TRANSPORTS:
        add_chat_model(repo, f"chat_{transport}", transport=transport, target_model="scripted_vllm",
                       tokenizer=str(tiny_model), served_model_name="scripted", idle_timeout_s="3",
                       http_url=f"127.0.0.1:{http_port}", grpc_url=f"127.0.0.1:{grpc_port}")
    return TritonServer(repo, http_port, grpc_port, metrics_port, log_path=log, exit_timeout_s=exit_timeout_s,
                        extra_args=["--model-control-mode=explicit", "--load-model=*"])


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    log = tmp_path_factory.getbasetemp() / "faults-tritonserver.log"
    # A short exit timeout: these tests kill a model's stub, and Triton then waits for it at exit.
    with scripted_server(tmp_path_factory.mktemp("faults_repository"), log, tiny_model, exit_timeout_s=3) as triton:
        yield triton


def repository(server, model: str, action: str) -> None:
    request = urllib.request.Request(f"http://{server.http_url}/v2/repository/models/{model}/{action}", data=b"{}",
                                     method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 200


def ok(client: ChatClient) -> bool:
    status, body = client.create(user(script(chunks=["fine"])))
    return status == 200 and body["choices"][0]["message"]["content"] == "fine"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_unloaded_generation_model_is_a_503_until_it_is_back(server, transport):
    client = ChatClient(server.http_url, f"chat_{transport}")
    assert ok(client)
    repository(server, "scripted_vllm", "unload")
    try:
        for stream in (False, True):
            started = time.monotonic()
            if stream:
                error = client.stream({**user("hi"), "stream": True}).error
            else:
                _status, error = client.create(user("hi"))
            assert time.monotonic() - started < 5
            assert error["error"]["code"] == "service_unavailable", error
    finally:
        repository(server, "scripted_vllm", "load")
    assert ok(client)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_killed_generation_model_ends_the_stream_with_an_error(server, transport):
    client = ChatClient(server.http_url, f"chat_{transport}")
    assert ok(client)
    request = {**user(script(chunks=["x"] * 200, interval_ms=20)), "stream": True}
    result: dict = {}

    def run():
        started = time.monotonic()
        result["stream"] = client.stream(request)
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(1.0)  # streaming by now
    os.kill(stub_pid(server, "scripted_vllm"), signal.SIGKILL)
    thread.join(timeout=30)
    assert not thread.is_alive(), "the stream did not end"
    stream = result["stream"]
    assert stream.error is not None and stream.error["error"]["type"] == "server_error", stream.error
    assert result["seconds"] < 1.0 + 10, result["seconds"]  # bound: the idle timeout (3 s) and then some
    assert stream.content.startswith("x")
    # openai_chat itself is fine; the killed model comes back by reloading it.
    repository(server, "scripted_vllm", "unload")
    repository(server, "scripted_vllm", "load")
    assert ok(client)
    assert json.loads(urllib.request.urlopen(f"http://{server.http_url}/v2/health/ready").read() or b"{}") == {}


def test_loopback_calls_carry_the_key_of_a_restricted_server(tmp_path, tiny_model):
    """A server whose inference endpoints want a key header: the HTTP and gRPC transports send
    `loopback_headers` and work; without them the generation model refuses the call."""
    repo = tmp_path / "repository"
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    add_test_model(repo, "scripted_vllm")
    common = dict(target_model="scripted_vllm", tokenizer=str(tiny_model), served_model_name="scripted",
                  http_url=f"127.0.0.1:{http_port}", grpc_url=f"127.0.0.1:{grpc_port}")
    for transport in ("http", "grpc"):
        add_chat_model(repo, f"chat_{transport}", transport=transport, loopback_headers="x-infer-key=s3cret", **common)
        add_chat_model(repo, f"chat_{transport}_keyless", transport=transport, **common)
    restricted = ["--http-restricted-api=inference:x-infer-key=s3cret",
                  "--grpc-restricted-protocol=inference:x-infer-key=s3cret"]
    with TritonServer(repo, http_port, grpc_port, metrics_port, log_path=tmp_path / "log", extra_args=restricted):
        for transport in ("http", "grpc"):
            client = ChatClient(server_url := f"127.0.0.1:{http_port}", f"chat_{transport}")
            client.session.headers["x-infer-key"] = "s3cret"
            status, body = client.create(user(script(chunks=["fine"])))
            assert status == 200 and body["choices"][0]["message"]["content"] == "fine", (transport, body)
            keyless = ChatClient(server_url, f"chat_{transport}_keyless")
            keyless.session.headers["x-infer-key"] = "s3cret"
            status, body = keyless.create(user(script(chunks=["fine"])))
            assert body["error"]["type"] == "server_error", (transport, body)


def test_sigterm_with_streams_in_flight_ends_soon_after_they_end(tmp_path, tiny_model):
    """SIGTERM while a stream is in flight on every transport: each stream still ends whole, and
    the server then exits with status 0 on its own, without waiting out its exit timeout (10 s)
    for loopback connections left open (idle ones close after `http_keepalive_s`, 2 s)."""
    with scripted_server(tmp_path / "repository", tmp_path / "log", tiny_model) as server:
        sigterm_mid_stream(server)


def sigterm_mid_stream(server: TritonServer) -> None:
    """SIGTERM once every stream has its first content (so its loopback stream is running: a
    request the chat model has not yet passed on when the server stops taking connections fails
    with a 503, which is not what this checks)."""
    texts: dict[str, str] = {}
    started = {transport: threading.Event() for transport in TRANSPORTS}

    def stream(transport: str) -> None:
        request = user(script(repeat={"text": "a ", "count": 15}, interval_ms=100), stream=True)
        body = {"request": json.dumps(request)}
        url = f"http://{server.http_url}/v2/models/chat_{transport}/generate_stream"
        text = ""
        with requests.post(url, json=body, stream=True, timeout=60) as response:
            for event in iter_sse(response):
                assert "error" not in event, (transport, event)
                for choice in json.loads(event["response"])["choices"]:
                    text += choice["delta"].get("content") or ""
                if text:
                    started[transport].set()
        texts[transport] = text

    threads = [threading.Thread(target=stream, args=(transport,)) for transport in TRANSPORTS]
    for thread in threads:
        thread.start()
    for transport, event in started.items():
        assert event.wait(20), f"the {transport} stream did not start"
    log_start = server.log_path.stat().st_size
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=30)
    assert texts == {transport: "a " * 15 for transport in TRANSPORTS}
    assert server.process.wait(timeout=30) == 0
    with open(server.log_path, "rb") as log:
        log.seek(log_start)
        tail = log.read().decode(errors="replace")
    assert "Exit timeout expired" not in tail
