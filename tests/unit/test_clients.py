"""The client side without a server: the wires against a fake Triton HTTP endpoint (httpx's
MockTransport), the OpenAI exceptions they raise, TritonChat / AsyncTritonChat on top of them, the
`tritonchat` command, and what the command and the gateway say when an extra is missing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import openai
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tritonchat.clients import AsyncTritonChat, TritonChat, api_error, wires
from tritonchat.clients.wires import AsyncHttpWire, HttpWire, http_base, httpx, wire
from tritonchat.errors import ERROR_KINDS, BadRequestError, NotFoundError

CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}]}
LAST = {**CHUNK, "choices": [{"index": 0, "delta": {"content": " world"}, "finish_reason": "stop"}]}
COMPLETION = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello world"},
                           "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
TEXT = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "text": "Hello world", "finish_reason": "stop", "logprobs": None}]}


def sse(*events: dict, separator: str = "data: ") -> bytes:
    return "".join(f"{separator}{json.dumps(event)}\n\n" for event in events).encode()


class FakeTriton:
    """Triton's HTTP generate / generate_stream for one test: `answer(model, body, stream)` gives
    (status, content type, content); the requests it got are kept."""

    def __init__(self, answer=None):
        self.requests: list[tuple[str, dict]] = []
        self.answer = answer or self.default

    @staticmethod
    def default(model: str, body: dict, stream: bool):
        if not stream:
            payload = TEXT if model == "openai_completions" else COMPLETION
            return 200, "application/json", json.dumps({"model_name": model, "response": json.dumps(payload)})
        chunks = [CHUNK, LAST]
        return 200, "text/event-stream", sse(*({"response": json.dumps(chunk)} for chunk in chunks))

    def handler(self, request):
        body = json.loads(request.content)
        self.requests.append((request.url.path, body))
        model, endpoint = request.url.path.split("/")[3], request.url.path.rsplit("/", 1)[1]
        status, kind, content = self.answer(model, json.loads(body["request"]), endpoint == "generate_stream")
        return httpx.Response(status, headers={"content-type": kind}, content=content)

    def transport(self):
        return httpx.MockTransport(self.handler)


def error_message(error) -> str:
    """A Triton error message as `openai_chat` sends it: the OpenAI error object as JSON."""
    return error.to_json()


@pytest.fixture
def triton(monkeypatch):
    fake = FakeTriton()
    monkeypatch.setitem(wires.WIRES, "http", lambda url, headers, timeout: HttpWire(
        url, headers, timeout, transport=fake.transport()))
    monkeypatch.setitem(wires.ASYNC_WIRES, "http", lambda url, headers, timeout: AsyncHttpWire(
        url, headers, timeout, transport=fake.transport()))
    return fake


# ------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_api_error_takes_its_status_from_the_servers_error_table(kind):
    error = api_error(error_message(kind("nope")), "http://triton/v2/models/openai_chat/generate")
    assert error.status_code == kind.status and error.body["message"] == "nope"
    expected = {400: openai.BadRequestError, 404: openai.NotFoundError, 500: openai.InternalServerError,
                503: openai.InternalServerError}.get(kind.status, openai.APIStatusError)
    assert type(error) is expected


def test_a_plain_triton_message_is_a_server_error():
    error = api_error("the model crashed", "grpc://localhost:8001/openai_chat")
    assert isinstance(error, openai.InternalServerError) and error.status_code == 500
    assert error.body == {"message": "the model crashed", "type": "server_error", "param": None, "code": None}


def test_the_hand_written_status_table_is_gone():
    import tritonchat.clients.errors as errors

    assert not hasattr(errors, "error_status")


# ------------------------------------------------------------------------------------------
# Wires
# ------------------------------------------------------------------------------------------


def test_wire_factory_and_http_base():
    assert http_base("localhost:8000") == "http://localhost:8000"
    assert http_base("https://triton.example/") == "https://triton.example"
    assert isinstance(wire("http", "localhost:8000"), HttpWire)
    assert isinstance(wire("http", "localhost:8000", asynchronous=True), AsyncHttpWire)
    with pytest.raises(ValueError, match="protocol must be one of"):
        wire("carrier-pigeon", "localhost:8000")
    assert sorted(wires.WIRES) == sorted(wires.ASYNC_WIRES) == ["grpc", "http"]


def test_http_wire_reads_generate_and_generate_stream():
    fake = FakeTriton()
    http = HttpWire("localhost:8000", transport=fake.transport())
    assert [json.loads(p) for p in http.payloads("openai_chat", '{"stream": false}', False)] == [COMPLETION]
    assert [json.loads(p) for p in http.payloads("openai_chat", '{"stream": true}', True)] == [CHUNK, LAST]
    assert [path for path, _ in fake.requests] == ["/v2/models/openai_chat/generate",
                                                    "/v2/models/openai_chat/generate_stream"]
    assert fake.requests[0][1] == {"request": '{"stream": false}'}


def test_http_wire_reads_events_as_sse_does():
    """`data:` without its space, CRLF line ends and other fields are read as `tritonchat.sse` reads them."""
    body = (b"event: message\r\ndata:" + json.dumps({"response": json.dumps(CHUNK)}).encode() + b"\r\n\r\n"
            + b": a comment\n\n" + sse({"response": json.dumps(LAST)}))
    fake = FakeTriton(lambda model, request, stream: (200, "text/event-stream", body))
    http = HttpWire("localhost:8000", transport=fake.transport())
    assert [json.loads(p) for p in http.payloads("openai_chat", "{}", True)] == [CHUNK, LAST]


def test_http_wire_errors_before_and_during_a_stream():
    def answer(model, request, stream):
        if request.get("refuse"):
            return 400, "application/json", json.dumps({"error": error_message(NotFoundError("no such model"))})
        events = [{"response": json.dumps(CHUNK)}, {"error": error_message(BadRequestError("bad", param="n"))}]
        return 200, "text/event-stream", sse(*events)

    http = HttpWire("localhost:8000", transport=FakeTriton(answer).transport())
    with pytest.raises(openai.NotFoundError) as info:
        list(http.payloads("openai_chat", '{"refuse": true}', True))
    assert info.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        list(http.payloads("openai_chat", '{"refuse": true}', False))
    payloads = http.payloads("openai_chat", "{}", True)
    assert json.loads(next(payloads)) == CHUNK
    with pytest.raises(openai.BadRequestError) as info:
        next(payloads)
    assert info.value.status_code == 400 and info.value.body["param"] == "n"


def test_http_wire_wraps_an_answer_that_is_not_json():
    http = HttpWire("localhost:8000", transport=FakeTriton(lambda *_: (502, "text/html", b"<h1>Bad gateway</h1>"))
                    .transport())
    with pytest.raises(openai.InternalServerError, match="Bad gateway"):
        list(http.payloads("openai_chat", "{}", False))
    with pytest.raises(openai.InternalServerError, match="Bad gateway"):
        list(http.payloads("openai_chat", "{}", True))


def test_async_http_wire():
    def answer(model, request, stream):
        if request.get("refuse"):
            return 400, "application/json", json.dumps({"error": error_message(NotFoundError("no such model"))})
        return FakeTriton.default(model, request, stream)

    async def run():
        http = AsyncHttpWire("localhost:8000", transport=FakeTriton(answer).transport())
        whole = [p async for p in http.payloads("openai_chat", "{}", False)]
        chunks = [p async for p in http.payloads("openai_chat", "{}", True)]
        with pytest.raises(openai.NotFoundError):
            [p async for p in http.payloads("openai_chat", '{"refuse": true}', True)]
        await http.close()
        return whole, chunks

    whole, chunks = asyncio.run(run())
    assert [json.loads(p) for p in whole] == [COMPLETION]
    assert [json.loads(p) for p in chunks] == [CHUNK, LAST]


# ------------------------------------------------------------------------------------------
# TritonChat, AsyncTritonChat
# ------------------------------------------------------------------------------------------


def test_triton_chat_returns_openai_types_and_sends_the_body_as_it_is(triton):
    with TritonChat("localhost:8000") as client:
        completion = client.chat.completions.create(model="m", messages=[], top_k=5, extra_body={"min_p": 0.1})
        with client.chat.completions.create(model="m", messages=[], stream=True, temperature=None) as stream:
            chunks = list(stream)
        text = client.completions.create(model="m", prompt="Say")
    assert isinstance(completion, ChatCompletion) and completion.choices[0].message.content == "Hello world"
    assert all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    assert "".join(chunk.choices[0].delta.content for chunk in chunks) == "Hello world"
    assert isinstance(text, Completion) and text.choices[0].text == "Hello world"
    bodies = [(path.rsplit("/", 2)[1], json.loads(body["request"])) for path, body in triton.requests]
    assert bodies == [("openai_chat", {"model": "m", "messages": [], "top_k": 5, "min_p": 0.1}),
                      ("openai_chat", {"model": "m", "messages": [], "stream": True}),
                      ("openai_completions", {"model": "m", "prompt": "Say"})]


def test_a_refused_stream_raises_from_create(triton):
    triton.answer = lambda *_: (400, "application/json",
                                json.dumps({"error": error_message(BadRequestError("bad", param="top_p"))}))
    with TritonChat("localhost:8000") as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=[], stream=True)
    assert info.value.body["param"] == "top_p"


def test_an_error_before_the_stream_as_an_event_is_the_models_error(triton):
    """Triton 2.51's generate_stream answers an error that comes before any response with its
    status and the error as an event: it reads as the model's error, not as a 500."""
    message = error_message(BadRequestError("Invalid value for 'temperature'", param="temperature"))
    triton.answer = lambda *_: (400, "text/event-stream", "data: " + json.dumps({"error": message}) + "\n\n")
    with TritonChat("localhost:8000") as client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=[], stream=True)
    assert info.value.status_code == 400 and info.value.body["param"] == "temperature"


def test_async_triton_chat(triton):
    async def run():
        async with AsyncTritonChat("localhost:8000") as client:
            completion = await client.chat.completions.create(model="m", messages=[])
            stream = await client.chat.completions.create(model="m", messages=[], stream=True)
            async with stream:
                text = "".join([chunk.choices[0].delta.content async for chunk in stream])
            return completion, text

    completion, text = asyncio.run(run())
    assert completion.choices[0].message.content == "Hello world" and text == "Hello world"


def test_an_unknown_protocol_is_refused():
    with pytest.raises(ValueError, match="protocol must be one of"):
        TritonChat("localhost:8000", protocol="smtp")


# ------------------------------------------------------------------------------------------
# The `tritonchat` command
# ------------------------------------------------------------------------------------------


def test_the_command_prints_the_answer(triton, capsys):
    from tritonchat.clients.cli import main

    assert main(["chat", "Hi", "--max-tokens", "3"]) == 0
    assert capsys.readouterr().out == "Hello world\n"
    assert json.loads(triton.requests[0][1]["request"])["max_completion_tokens"] == 3


def test_the_command_prints_an_error_and_exits_1(triton, capsys):
    from tritonchat.clients.cli import main

    triton.answer = lambda *_: (400, "application/json",
                                json.dumps({"error": error_message(BadRequestError("temperature is 9"))}))
    assert main(["chat", "Hi", "--temperature", "9"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "error (400): temperature is 9\n"


def run_without(modules: tuple[str, ...], code: str) -> subprocess.CompletedProcess:
    shim = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules) + code
    return subprocess.run([sys.executable, "-c", shim], capture_output=True, text=True, timeout=60)


def test_the_console_script_without_the_client_extra_says_so_in_one_line():
    # The entry point as installed from pyproject.toml's [project.scripts].
    result = run_without(("openai",), (
        "from importlib.metadata import entry_points\n"
        "sys.argv = ['tritonchat', 'chat', 'Hi']\n"
        "sys.exit(entry_points(group='console_scripts')['tritonchat'].load()())\n"))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "tritonchat: needs the client extra (openai is not installed): pip install 'tritonchat[client]'"]


def test_the_command_help_works_without_the_extra():
    result = run_without(("openai",), "from tritonchat.clients.cli import main\nmain(['--help'])\n")
    assert result.returncode == 0 and "usage: tritonchat" in result.stdout


@pytest.mark.parametrize("module", ["fastapi", "uvicorn", "openai"])
def test_the_gateway_without_its_extra_says_so_in_one_line(module):
    result = run_without((module,), (
        "import runpy\n"
        "sys.argv = ['gateway', '--port', '0']\n"
        "runpy.run_module('tritonchat.clients.gateway', run_name='__main__')\n"))
    assert result.returncode == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line == (f"tritonchat gateway: needs the gateway extra ({module} is not installed): "
                    "pip install 'tritonchat[gateway]'")
