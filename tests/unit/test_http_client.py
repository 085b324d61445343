"""The HTTP transport's own client (transports/http_client.py) and its reading of `generate_stream`,
against a local server that writes scripted bytes: chunked bodies split anywhere, keep-alive and
its idle timeout, errors before any event, lost connections, cancelling by closing, and the events
of one read handed over together."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from tests.unit.fakes import FakeSink
from tests.unit.test_sender import builder
from tritonchat.errors import InternalError, UnavailableError
from tritonchat.formats import Decoder, GenerationOutput
from tritonchat.formats.vllm import VllmFormat
from tritonchat.sender import RequestState, Sender, pump
from tritonchat.transports import http as http_module
from tritonchat.transports.http import HttpTransport, parse_event
from tritonchat.transports.http_client import HttpClient, HttpClientError

NAMES = ["text_output", "finish_reason", "num_input_tokens", "num_output_tokens"]


def event(text: str, reason: str = "None", tokens: int = 1) -> bytes:
    return b"data: " + json.dumps({"model_name": "m", "model_version": "1", "text_output": text,
                                    "finish_reason": reason, "num_input_tokens": 3,
                                    "num_output_tokens": tokens}).encode() + b"\n\n"


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Server:
    """Answers each request on a connection with the next scripted answer: bytes written in the
    given pieces (a float in the list: a pause of that many seconds; None: close the connection)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.connections = 0
        self.closed_by_client = 0
        self.server = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    self.closed_by_client += 1
                    return
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                self.requests.append((head, await reader.readexactly(length)))
                for piece in self.answers.pop(0):
                    if piece is None:
                        writer.close()
                        return
                    if isinstance(piece, float):  # a pause, noticing a client that closes meanwhile
                        try:
                            if await asyncio.wait_for(reader.read(1), piece) == b"":
                                self.closed_by_client += 1
                                return
                        except asyncio.TimeoutError:
                            pass
                        continue
                    writer.write(piece)
                    await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_client += 1
        finally:
            writer.close()

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()


def split_every(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


@pytest.mark.parametrize("size", [1, 2, 5, 17, 1000])
def test_a_chunked_body_split_anywhere_reads_whole(size):
    body = chunked(event("Hello"), event(" world", "stop"))
    answer = split_every(STREAM_HEAD + body, size)

    async def main():
        server = Server([answer])
        client = HttpClient("127.0.0.1", await server.start(), keepalive_s=1.0)
        connection = await client.post("/v2/models/m/generate_stream", b'{"x": 1}', {"Content-Type": "application/json"})
        assert connection.status == 200 and connection.headers["content-type"] == "text/event-stream"
        data = await connection.read_all()
        connection.release()
        head, request_body = server.requests[0]
        await client.close()
        await server.stop()
        return data, head, request_body

    data, head, request_body = run(main())
    assert data == event("Hello") + event(" world", "stop")
    assert head.startswith(b"POST /v2/models/m/generate_stream HTTP/1.1\r\n")
    assert b"Content-Length: 8\r\n" in head and b"Host: 127.0.0.1:" in head and request_body == b'{"x": 1}'


def test_connections_are_kept_alive_then_closed_when_idle():
    answer = [STREAM_HEAD + chunked(event("a", "stop"))]

    async def main():
        server = Server([answer] * 3)
        client = HttpClient("127.0.0.1", await server.start(), keepalive_s=0.2)
        for _ in range(2):
            connection = await client.post("/p", b"{}", {})
            await connection.read_all()
            connection.release()
        assert server.connections == 1 and client.idle_connections == 1
        await asyncio.sleep(0.4)
        assert client.idle_connections == 0
        await asyncio.sleep(0.05)
        assert server.closed_by_client == 1
        connection = await client.post("/p", b"{}", {})
        await connection.read_all()
        connection.release()
        await client.close()
        await server.stop()
        return server.connections

    assert run(main()) == 2


def test_keepalive_zero_is_a_connection_per_call():
    answer = [STREAM_HEAD + chunked(event("a", "stop"))]

    async def main():
        server = Server([answer] * 2)
        client = HttpClient("127.0.0.1", await server.start(), keepalive_s=0)
        for _ in range(2):
            connection = await client.post("/p", b"{}", {})
            await connection.read_all()
            connection.release()
            assert connection.closed and client.idle_connections == 0
        await server.stop()
        return server.connections

    assert run(main()) == 2


def test_an_idle_connection_the_server_closed_is_replaced():
    """The server closes a kept connection (after its answer): the next call takes a new one."""
    answer = [STREAM_HEAD + chunked(event("a", "stop"))]

    async def main():
        server = Server([answer + [None], answer])
        client = HttpClient("127.0.0.1", await server.start(), keepalive_s=5.0)
        connection = await client.post("/p", b"{}", {})
        await connection.read_all()
        connection.release()
        connection = await client.post("/p", b"{}", {})
        data = await connection.read_all()
        connection.release()
        await client.close()
        await server.stop()
        return data, server.connections

    data, connections = run(main())
    assert data == event("a", "stop") and connections == 2


@pytest.mark.parametrize("answer", [
    [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"],
    [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", 0.05, b"lo"],
    [b"HTTP/1.0 200 OK\r\n\r\nhel", b"lo", None],
])
def test_bodies_framed_by_length_or_by_the_connections_end(answer):
    async def main():
        server = Server([answer])
        client = HttpClient("127.0.0.1", await server.start(), keepalive_s=1.0)
        connection = await client.post("/p", b"{}", {})
        data = await connection.read_all()
        connection.release()
        await client.close()
        await server.stop()
        return data

    assert run(main()) == b"hello"


@pytest.mark.parametrize("answer", [
    [STREAM_HEAD + b"10\r\n" + event("a")[:5], None],  # lost mid-chunk
    [STREAM_HEAD, None],  # lost before the first event
    [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", None],
    [STREAM_HEAD + b"zz\r\n"],  # a malformed chunk size
    [b"SSH-2.0-OpenSSH\r\n\r\n"],
])
def test_a_broken_or_malformed_response_raises(answer):
    async def main():
        server = Server([answer])
        client = HttpClient("127.0.0.1", await server.start(), keepalive_s=1.0)
        try:
            connection = await client.post("/p", b"{}", {})
            await connection.read_all()
        finally:
            await server.stop()

    with pytest.raises(HttpClientError):
        run(main())


def test_nothing_listening_raises():
    async def main():
        server = Server([])
        port = await server.start()
        await server.stop()
        await HttpClient("127.0.0.1", port).post("/p", b"{}", {})

    with pytest.raises(HttpClientError, match="cannot connect"):
        run(main())


# ---- the transport: events, errors, cancelling ---------------------------------------------------


def transport_for(port: int, **kw) -> HttpTransport:
    return HttpTransport(f"127.0.0.1:{port}", "m", client="asyncio", **kw)


async def read_stream(transport: HttpTransport) -> list:
    stream = await transport.open(_call())
    return [item async for item in stream]


def _call():
    from tritonchat.formats import TargetCall  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    return TargetCall(inputs={"text_input": np.array([b"hi"], dtype=np.object_)}, outputs=NAMES, request_id="r1")


def test_the_transport_yields_each_events_outputs_and_sends_the_inputs():
    answer = [STREAM_HEAD, chunked(event("Hel"), event("lo", "stop"))]

    async def main():
        server = Server([answer])
        transport = transport_for(await server.start())
        items = await read_stream(transport)
        await transport.close()
        await server.stop()
        return items, server.requests[0]

    items, (head, body) = run(main())
    assert [item["text_output"][0] for item in items] == ["Hel", "lo"]
    assert items[1]["finish_reason"][0] == "stop" and int(items[1]["num_output_tokens"][0]) == 1
    assert json.loads(body) == {"text_input": "hi", "id": "r1"}
    assert head.startswith(b"POST /v2/models/m/generate_stream HTTP/1.1")


def test_events_of_one_read_come_as_one_list_with_merge_events():
    answer = [STREAM_HEAD + chunked(event("a"), event("b"), event("c", "stop"))]

    async def main():
        server = Server([answer, answer])
        port = await server.start()
        merged = await read_stream(transport_for(port, merge_events=True))
        separate = await read_stream(transport_for(port, merge_events=False))
        await server.stop()
        return merged, separate

    merged, separate = run(main())
    assert len(merged) == 1 and [o["text_output"][0] for o in merged[0]] == ["a", "b", "c"]
    assert [o["text_output"][0] for o in separate] == ["a", "b", "c"]


@pytest.mark.parametrize("answer", [
    [b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n"
     b'{"error":"Error generating stream: scripted fail"}'],
    [b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
     chunked(b'data: {"error":"Error generating stream: scripted fail"}\n\n')],
])
def test_an_error_before_any_event_is_the_models_error(answer):
    async def main():
        server = Server([answer])
        try:
            await read_stream(transport_for(await server.start()))
        finally:
            await server.stop()

    with pytest.raises(InternalError, match="The generation model failed: Error generating stream: scripted fail"):
        run(main())


def test_an_error_event_mid_stream_comes_after_the_events_before_it():
    answer = [STREAM_HEAD + chunked(event("a"), b'data: {"error":"engine fell over"}\n\n')]

    async def main():
        server = Server([answer])
        stream = await transport_for(await server.start(), merge_events=True).open(_call())
        items = []
        try:
            async for item in stream:
                items.append(item)
        except InternalError as error:
            return items, error
        finally:
            await server.stop()

    items, error = run(main())
    assert [o["text_output"][0] for o in items[0]] == ["a"] if isinstance(items[0], list) else items[0]
    assert "engine fell over" in error.message


@pytest.mark.parametrize("client", ["asyncio", "aiohttp"])
def test_a_connection_lost_mid_stream_is_unavailable(client):
    answer = [STREAM_HEAD + b"%x\r\n%s\r\n" % (len(event("a")), event("a")), 0.05, None]

    async def main():
        server = Server([answer])
        transport = HttpTransport(f"127.0.0.1:{await server.start()}", "m", client=client)
        try:
            await read_stream(transport)
        finally:
            await transport.close()
            await server.stop()

    with pytest.raises(UnavailableError, match="The generation model is unavailable"):
        run(main())


def test_nothing_listening_is_unavailable():
    async def main():
        server = Server([])
        port = await server.start()
        await server.stop()
        await read_stream(transport_for(port))

    with pytest.raises(UnavailableError, match="The generation model is unavailable: cannot connect"):
        run(main())


@pytest.mark.parametrize("when", ["before the response", "mid-stream"])
def test_abandoning_closes_the_connection_and_ends_the_stream(when):
    """Closing the connection is how Triton is told to cancel the request. Mid-stream the stream
    ends quietly; while it still waits for the response its reading task is cancelled (as the
    pump's is in the model), and the connection closed all the same."""
    first = [STREAM_HEAD + b"%x\r\n%s\r\n" % (len(event("a")), event("a"))] if when == "mid-stream" else []
    answer = first + [5.0]

    async def main():
        server = Server([answer])
        stream = await transport_for(await server.start()).open(_call())
        items = []

        async def read():
            async for item in stream:
                items.append(item)

        task = asyncio.ensure_future(read())
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, stream.cancel_hook())
        started = loop.time()
        await asyncio.wait([task], timeout=2)
        waited = loop.time() - started
        await asyncio.sleep(0.1)
        await server.stop()
        return items, waited, task.cancelled(), server.closed_by_client

    items, waited, cancelled, closed = run(main())
    assert len(items) == (1 if when == "mid-stream" else 0)
    assert cancelled == (when != "mid-stream")
    assert waited < 2 and closed == 1


def test_abandoning_before_connecting_cancels_the_reading_task():
    async def main():
        server = Server([[5.0]])
        stream = await transport_for(await server.start()).open(_call())
        stream.abandon()
        items = [item async for item in stream]
        await server.stop()
        return items, server.connections

    assert run(main()) == ([], 0)


def test_an_abandon_after_the_stream_ended_leaves_the_pooled_connection_alone():
    answer = [STREAM_HEAD + chunked(event("a", "stop"))]

    async def main():
        server = Server([answer, answer])
        transport = transport_for(await server.start())
        first = await transport.open(_call())
        assert len([item async for item in first]) == 1
        first.abandon()  # e.g. the client went away just after the stream ended
        second = await read_stream(transport)
        await transport.close()
        await server.stop()
        return second, server.connections

    second, connections = run(main())
    assert len(second) == 1 and connections == 1


# ---- the pump: responses that arrive together --------------------------------------------------


class CountingSender(Sender):
    def __init__(self):
        super().__init__(cancel_check_interval=0.01)
        self.outputs: list[GenerationOutput] = []

    def output(self, state, index, output):
        self.outputs.append(output)
        super().output(state, index, output)


class ListStream:
    def __init__(self, items):
        self.items = items

    async def __aiter__(self):
        for item in self.items:
            yield item

    def abandon(self):
        pass

    async def released(self):
        pass

    def cancel_hook(self):
        return self.abandon


def outputs_of(text: str, reason: str = "None") -> dict:
    return json_outputs({"text_output": text, "finish_reason": reason, "num_input_tokens": 3, "num_output_tokens": 1})


def json_outputs(event_value: dict) -> dict:
    return http_module.event_outputs(event_value, NAMES)


def pump_items(items, decoder: Decoder):
    sink = FakeSink()
    sender = CountingSender()
    state = RequestState(builder(), sink, stream=True, require_finish_reason=True)
    sender.start(state)
    asyncio.run(pump(sender, state, 0, ListStream(items), decoder))
    assert sink.done.wait(5)
    sender.stop()
    return sender.outputs, sink


def test_responses_that_arrive_together_are_handed_over_as_one_output():
    items = [outputs_of("a"), [outputs_of("b"), outputs_of("c"), outputs_of("d", "length")]]
    handed, sink = pump_items(items, VllmFormat().decoder(None))
    assert [(o.text, o.completion_tokens, o.finish_reason) for o in handed] == [("a", 1, None), ("bcd", 3, "length")]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in sink.payloads) == "abcd"
    assert sink.payloads[-1]["choices"][0]["finish_reason"] == "length"


def test_a_stop_inside_a_batch_ends_it_there():
    class StopAt(Decoder):
        finished = False

        def __init__(self):
            pass

        def decode(self, outputs):
            text = str(outputs["text_output"][0])
            self.finished = text == "STOP"
            return GenerationOutput(text=text, completion_tokens=1, finish_reason="stop" if self.finished else None)

    handed, sink = pump_items([[outputs_of("a"), outputs_of("STOP"), outputs_of("never")]], StopAt())
    assert [o.text for o in handed] == ["aSTOP"] and handed[0].finish_reason == "stop"


def test_a_decoder_failure_inside_a_batch_hands_over_what_came_before():
    class FailOn(Decoder):
        def __init__(self):
            pass

        def decode(self, outputs):
            if outputs["text_output"][0] == "bad":
                raise InternalError("cannot decode")
            return GenerationOutput(text=str(outputs["text_output"][0]), completion_tokens=1)

    handed, sink = pump_items([[outputs_of("a"), outputs_of("b"), outputs_of("bad")]], FailOn())
    assert [o.text for o in handed] == ["ab"]
    assert [e.message for e in sink.errors] == ["cannot decode"]


# ---- each event's JSON -------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [
    b'{"text_output": "caf\\u00e9 \\ud83c\\udf89 \\"q\\" \\\\ \\n", "num_output_tokens": 1}',
    b'{"text_output": "\xe4\xbd\xa0\xe5\xa5\xbd"}',
    b'{"v": 18446744073709551615, "u": -9223372036854775808, "w": -1.5e-7, "x": 1e400}',  # Triton's widest
    b'{"v": NaN}',
    b'{"text_output": "\\ud800"}',  # a lone surrogate
])
def test_events_read_as_json_reads_them(payload):
    expected = json.loads(payload)
    value = parse_event(payload)
    assert value.keys() == expected.keys()
    for key in expected:
        same = value[key] == expected[key] or (isinstance(value[key], float) and math.isnan(value[key]))
        assert same and type(value[key]) is type(expected[key])
