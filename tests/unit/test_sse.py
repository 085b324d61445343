"""The one reader of server-sent events (Triton's generate_stream, the gateway)."""

from __future__ import annotations

import asyncio

import pytest

from tritonchat.sse import EventReader, aevents, data_of, events

STREAM = b'data: {"a": 1}\n\ndata: {"b": "x\\ny"}\n\n: a comment\n\ndata: [DONE]\n\n'


@pytest.mark.parametrize(("line", "value"), [
    (b'data: {"a": 1}\n', b'{"a": 1}'), (b"data:{}", b"{}"), (b"data:  two", b" two"), (b": comment", None),
    (b"event: x", None), ('data: {"a": 1}\r\n', '{"a": 1}'), ("id: 3", None)])
def test_data_of(line, value):
    assert data_of(line) == value


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
def test_events_split_anywhere_come_out_whole(size):
    reader = EventReader()
    found = []
    for start in range(0, len(STREAM), size):
        found += reader.feed(STREAM[start:start + size])
    assert found == [b'{"a": 1}', b'{"b": "x\\ny"}', b"[DONE]"]


def test_crlf_line_ends_and_multi_line_events():
    reader = EventReader()
    assert reader.feed(b"event: message\r\ndata: 1\r\n\r\ndata: 2\r") == [b"1"]
    assert reader.feed(b"\n\r\n") == [b"2"]


def test_events_parse_json_and_skip_done():
    lines = [line + b"\n" for line in STREAM.split(b"\n")]
    assert list(events(lines)) == [{"a": 1}, {"b": "x\ny"}]
    assert list(events(line.decode() for line in lines)) == [{"a": 1}, {"b": "x\ny"}]

    async def lines_async():
        for line in lines:
            yield line

    async def collect():
        return [value async for value in aevents(lines_async())]

    assert asyncio.run(collect()) == [{"a": 1}, {"b": "x\ny"}]
