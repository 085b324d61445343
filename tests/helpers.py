"""Test helpers: request builders and clients of `openai_chat` over HTTP and gRPC."""

from __future__ import annotations

import json
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tritonchat.sse import events

from harness.repositories import ROOT  # noqa: F401  (tests find the project from here)


def user(content, **fields) -> dict:
    """A chat request with one user message."""
    return {"messages": [{"role": "user", "content": content}], **fields}


def script(**spec) -> str:
    """A user message that makes the scripted backend produce exactly `spec`."""
    return "SCRIPT:" + json.dumps(spec)


@dataclass
class StreamResult:
    status: int
    chunks: list[dict] = field(default_factory=list)
    error: dict | None = None  # the OpenAI error object, when the stream ended with one
    raw_events: list[dict] = field(default_factory=list)

    @property
    def content(self) -> str:
        return "".join(
            (choice["delta"].get("content") or "") for chunk in self.chunks for choice in chunk["choices"]
        )


class ChatClient:
    """`openai_chat` through Triton's HTTP generate extension."""

    # Every client's session, so that `close_all` can close their keep-alive connections.
    sessions: weakref.WeakSet = weakref.WeakSet()

    def __init__(self, http_url: str, model: str = "openai_chat"):
        self.base = f"http://{http_url}/v2/models"
        self.model = model
        self.session = requests.Session()
        ChatClient.sessions.add(self.session)

    @classmethod
    def close_all(cls) -> None:
        for session in list(cls.sessions):
            session.close()

    def _body(self, request: dict | str, request_id: str | None) -> dict:
        body = {"request": request if isinstance(request, str) else json.dumps(request)}
        if request_id is not None:
            body["id"] = request_id
        return body

    def create(self, request: dict | str, *, request_id: str | None = None, model: str | None = None):
        """Non-streaming: returns (status, completion dict or OpenAI error dict)."""
        r = self.session.post(f"{self.base}/{model or self.model}/generate", json=self._body(request, request_id), timeout=120)
        data = r.json()
        if "error" in data:
            return r.status_code, parse_error(data["error"])
        return r.status_code, json.loads(data["response"])

    def stream(self, request: dict | str, *, request_id: str | None = None, model: str | None = None) -> StreamResult:
        with self.session.post(
            f"{self.base}/{model or self.model}/generate_stream",
            json=self._body(request, request_id),
            stream=True,
            timeout=120,
        ) as r:
            result = StreamResult(status=r.status_code)
            if r.headers.get("content-type", "").startswith("application/json"):
                result.error = parse_error(r.json()["error"])
                return result
            for event in iter_sse(r):
                result.raw_events.append(event)
                if "error" in event:
                    result.error = parse_error(event["error"])
                else:
                    result.chunks.append(json.loads(event["response"]))
            return result


def iter_sse(response):
    """The JSON value of each server-sent event of a `requests` streaming response."""
    return events(response.iter_lines(decode_unicode=False))


def parse_error(message: str) -> dict:
    """The OpenAI error object inside a Triton error message (or the raw message when it is not one)."""
    try:
        value = json.loads(message)
    except (TypeError, json.JSONDecodeError):
        return {"error": {"message": message, "type": None, "param": None, "code": None}, "raw": True}
    return value


class GrpcChatClient:
    """`openai_chat` through Triton's gRPC streaming API (tritonclient)."""

    def __init__(self, grpc_url: str, model: str = "openai_chat"):
        self.url = grpc_url
        self.model = model

    def stream(self, request: dict, *, request_id: str = "", grpc_error_status: bool = False, timeout: float = 60):
        """Returns (payload dicts, error) for one request; error is an InferenceServerException."""
        import queue

        import numpy as np
        import tritonclient.grpc as grpcclient

        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(self.url)
        headers = {"triton_grpc_error": "true"} if grpc_error_status else None
        client.start_stream(callback=lambda result, error: results.put((result, error)), headers=headers)
        try:
            tensor = grpcclient.InferInput("request", [1], "BYTES")
            tensor.set_data_from_numpy(np.array([json.dumps(request).encode()], dtype=np.object_))
            client.async_stream_infer(self.model, [tensor], request_id=request_id, enable_empty_final_response=True)
            payloads = []
            while True:
                result, error = results.get(timeout=timeout)
                if error is not None:
                    return payloads, error
                response = result.get_response()
                if response.outputs:
                    payloads.append(json.loads(result.as_numpy("response")[0]))
                if response.parameters["triton_final_response"].bool_param:
                    return payloads, None
        finally:
            client.stop_stream()
            client.close()


def stub_pid(server, model: str) -> int:
    """The process id of `model`'s Python backend stub on `server` (a TritonServer)."""
    marker = f"{server.model_repository}/{model}/1/model.py"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    return int(entry.name)
            except OSError:
                continue
    raise AssertionError(f"no stub for {model}")


@contextmanager
def served_app(app, timeout: float = 20.0):
    """An ASGI app (the gateway) served by uvicorn on a free local port, on a thread; yields its URL."""
    import threading  # noqa: PLC0415
    import time  # noqa: PLC0415

    import uvicorn  # noqa: PLC0415

    from harness.server import free_port  # noqa: PLC0415

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
