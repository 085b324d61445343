"""The gRPC transport's streams without a server: a call given up is drained (read to its end)
and cancelled only once it has gone silent, and while `max_draining` calls drain, new calls wait
to start (one given up while it waits never starts)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from tritonchat.transports.grpc import GrpcTransport


class FakeCall:
    """A `ModelStreamInfer` call: `count` raw messages `interval` apart, then silence for `hang`
    seconds (or until cancelled), then its end. Iterating it twice continues the same stream, as
    grpc.aio's calls do."""

    def __init__(self, count: int, interval: float = 0.0, hang: float = 0.0):
        self.count, self.interval, self.hang = count, interval, hang
        self.sent = 0
        self.cancelled = False
        self._done = False
        self._messages = self._generate()

    async def _generate(self):
        try:
            for _ in range(self.count):
                await asyncio.sleep(self.interval)
                if self.cancelled:
                    raise grpc.aio.AioRpcError(grpc.StatusCode.CANCELLED, grpc.aio.Metadata(), grpc.aio.Metadata())
                self.sent += 1
                yield b"message"
            end = asyncio.get_running_loop().time() + self.hang
            while asyncio.get_running_loop().time() < end:
                if self.cancelled:
                    raise grpc.aio.AioRpcError(grpc.StatusCode.CANCELLED, grpc.aio.Metadata(), grpc.aio.Metadata())
                await asyncio.sleep(0.005)
        finally:
            self._done = True

    def __aiter__(self):
        return self._messages

    def done(self) -> bool:
        return self._done

    def cancel(self) -> None:
        self.cancelled = True


def transport(calls: list[FakeCall], max_draining: int, drain_timeout: float = 60.0) -> GrpcTransport:
    """A transport whose calls are `calls`, in the order streams start them."""
    made = GrpcTransport("unused:1", "target", drain_timeout=drain_timeout, max_draining=max_draining)
    pending = iter(calls)
    made.started = []

    def start(request):
        call = next(pending)
        made.started.append(request)
        return call

    made.start = start
    made._parse = lambda raw: SimpleNamespace(error_message="", infer_response=SimpleNamespace(
        outputs=[], raw_output_contents=[]))
    return made


async def read(stream, count: int | None = None) -> int:
    """Reads `count` responses of `stream` (all when None); how many it read."""
    seen = 0
    async for _outputs in stream:
        seen += 1
        if count is not None and seen >= count:
            break
    return seen


async def give_up(stream) -> None:
    stream.abandon()
    await stream.released()


def test_a_new_call_waits_while_the_cap_of_draining_calls_is_reached():
    async def scenario():
        slow = FakeCall(count=20, interval=0.01)
        link = transport([slow, FakeCall(count=2)], max_draining=1)
        first = await link.open(SimpleNamespace(inputs={}, outputs=[], request_id="a"))
        assert await read(first, 1) == 1
        first.abandon()
        assert link.draining == 1
        drain = asyncio.ensure_future(first.released())
        second = await link.open(SimpleNamespace(inputs={}, outputs=[], request_id="b"))
        reading = asyncio.ensure_future(read(second))
        await asyncio.sleep(0.05)
        assert len(link.started) == 1 and not reading.done(), "the second call started while the first drained"
        await drain
        assert slow.sent == 20 and not slow.cancelled and link.draining == 0
        assert await reading == 2 and len(link.started) == 2

    asyncio.run(scenario())


def test_a_call_given_up_while_it_waits_never_starts():
    async def scenario():
        link = transport([FakeCall(count=50, interval=0.01)], max_draining=1)
        first = await link.open(SimpleNamespace(inputs={}, outputs=[], request_id="a"))
        await read(first, 1)
        first.abandon()
        second = await link.open(SimpleNamespace(inputs={}, outputs=[], request_id="b"))
        reading = asyncio.ensure_future(read(second))
        await asyncio.sleep(0.02)
        await give_up(second)
        assert await asyncio.wait_for(reading, 1) == 0
        await first.released()
        assert len(link.started) == 1 and link.draining == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("max_draining", [0, 3])
def test_no_cap_or_under_it_calls_start_at_once(max_draining):
    async def scenario():
        calls = [FakeCall(count=30, interval=0.01) for _ in range(3)] + [FakeCall(count=1)]
        link = transport(calls, max_draining=max_draining)
        streams = [await link.open(SimpleNamespace(inputs={}, outputs=[], request_id=str(i))) for i in range(4)]
        for stream in streams[:3]:
            await read(stream, 1)
            stream.abandon()
        assert link.draining == 3
        if max_draining:
            waiting = asyncio.ensure_future(read(streams[3]))
            await asyncio.sleep(0.02)
            assert not waiting.done()
        else:
            assert await asyncio.wait_for(read(streams[3]), 1) == 1
        await asyncio.gather(*(stream.released() for stream in streams[:3]))
        if max_draining:
            assert await asyncio.wait_for(waiting, 1) == 1
        assert link.draining == 0

    asyncio.run(scenario())


def test_a_drained_call_that_keeps_sending_is_not_cancelled():
    async def scenario():
        busy = FakeCall(count=30, interval=0.01)
        link = transport([busy], max_draining=0, drain_timeout=0.05)
        stream = await link.open(SimpleNamespace(inputs={}, outputs=[], request_id="a"))
        await read(stream, 1)
        await give_up(stream)
        assert busy.sent == 30 and not busy.cancelled

    asyncio.run(scenario())


def test_a_drained_call_that_goes_silent_is_cancelled():
    async def scenario():
        silent = FakeCall(count=3, interval=0.01, hang=5.0)
        link = transport([silent], max_draining=1, drain_timeout=0.1)
        stream = await link.open(SimpleNamespace(inputs={}, outputs=[], request_id="a"))
        await read(stream, 1)
        await asyncio.wait_for(give_up(stream), 2)
        assert silent.sent == 3 and silent.cancelled and link.draining == 0

    asyncio.run(scenario())


def test_a_drained_call_read_to_its_end_by_its_reader_frees_its_place():
    """Given up while its reader waits for the next response, and the call then ends: the
    reader sees the end, and the call no longer counts as draining."""
    async def scenario():
        link = transport([FakeCall(count=2, interval=0.02)], max_draining=1)
        stream = await link.open(SimpleNamespace(inputs={}, outputs=[], request_id="a"))
        reading = asyncio.ensure_future(read(stream))
        await asyncio.sleep(0.03)
        stream.abandon()
        assert link.draining == 1
        assert await reading == 2
        assert link.draining == 0

    asyncio.run(scenario())
