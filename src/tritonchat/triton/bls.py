"""`transport: bls`: the generation model called with BLS `async_exec(decoupled=True)`.

A stream's `ResponseIterator` blocks on `next()`, so a thread reads it and hands each
response to the event loop. Three rules keep the Python backend's stub alive (see docs/design.md,
"Transports" and "Known limits", and docs/upstream/):
- one BLS stream at a time per model instance: the stub deadlocks when one thread waits in
  `next()` while another starts or drops a stream (a lock cycle between the GIL, the stub's
  iterator map and the iterator's mutex, in every release from 24.10 on). Concurrency comes
  from `instance_group` count, as with NVIDIA's `tensorrt_llm_bls`;
- every stream is read up to its final response, also when nobody wants it any more;
- finished iterators are held a few seconds (`_RetiredIterators`) so that their last release
  happens in Python, with the GIL.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import InternalError
from ..formats import TargetCall
from ..transports.base import error_for, register_transport
from .sink import pb

log = logging.getLogger(__name__)

_END = object()


class BlsTransport:
    """`silence_timeout`: how long an abandoned stream may stay silent before its instance takes
    the next stream anyway (0: never). On releases without `ResponseIterator.cancel()` (before
    25.04) nothing can end a stream the generation model never finishes; a silent stream cannot
    take part in the lock cycle (its reader is not being woken), so it is left behind."""

    def __init__(self, model: str, version: int = -1, silence_timeout: float = 0.0):
        self.model = model
        self.version = version
        self.silence_timeout = silence_timeout
        self._one_stream: asyncio.Semaphore | None = None  # created on the event loop

    async def open(self, call: TargetCall) -> BlsStream:
        utils = pb()
        loop = asyncio.get_running_loop()
        if self._one_stream is None:
            self._one_stream = asyncio.Semaphore(1)
            # `async_exec` runs in the loop's default executor until the first response.
            loop.set_default_executor(ThreadPoolExecutor(max_workers=2, thread_name_prefix="chat-bls"))
        await self._one_stream.acquire()
        slot = _Slot(self._one_stream, loop)
        try:
            request = utils.InferenceRequest(
                request_id=call.request_id,
                model_name=self.model,
                model_version=self.version,
                inputs=[utils.Tensor(name, value) for name, value in call.inputs.items()],
                requested_output_names=call.outputs,
            )
            iterator = await request.async_exec(decoupled=True)
        except BaseException:
            slot.release()
            raise
        return BlsStream(iterator, loop, slot, self.silence_timeout)

    async def close(self) -> None:
        _retired.clear()


class _Slot:
    """The instance's one BLS stream, released exactly once (from any thread)."""

    def __init__(self, semaphore: asyncio.Semaphore, loop: asyncio.AbstractEventLoop):
        self._semaphore, self._loop = semaphore, loop
        self._lock = threading.Lock()
        self._held = True

    def release(self) -> None:
        with self._lock:
            held, self._held = self._held, False
        if held:
            self._loop.call_soon_threadsafe(self._semaphore.release)


class BlsStream:
    """One BLS response stream, read on its own thread and handed to the event loop."""

    def __init__(self, iterator, loop: asyncio.AbstractEventLoop, slot: _Slot, silence_timeout: float = 0.0):
        self._iterator = iterator
        self._loop = loop
        self._slot = slot
        self._silence_timeout = silence_timeout
        self._queue: asyncio.Queue = asyncio.Queue()
        self._abandoned = False
        self._last_response = time.monotonic()
        threading.Thread(target=self._read, daemon=True, name="chat-bls-read").start()

    def _put(self, item) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _read(self) -> None:
        """Thread body: every response up to the final one; those after `abandon` are dropped."""
        codes = _code_names()
        try:
            for response in self._iterator:
                self._last_response = time.monotonic()
                if self._abandoned:
                    continue
                if response.has_error():
                    error = response.error()
                    code = error.code() if hasattr(error, "code") else None
                    self._put(error_for(codes.get(code), error.message()))
                    self._abandoned = True
                    continue
                tensors = response.output_tensors()
                # (a flag-only FINAL from the generation model has no tensors)
                self._put({t.name(): t.as_numpy() for t in tensors} if tensors else {})
            self._put(_END)
        except Exception as exc:  # noqa: BLE001  (the reader of this stream must learn of it)
            log.exception("BLS stream failed")
            self._put(InternalError(f"The generation stream failed: {exc}"))
        _retired.add(self._iterator)
        self._slot.release()  # the next stream of this instance may start

    async def __aiter__(self):
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, Exception):
                raise item
            yield item

    def abandon(self) -> None:
        """Any thread: drop what comes next; cancel the generation where the release can
        (`ResponseIterator.cancel()`, Triton 25.04 and later). The reader still reads to the end;
        if the stream stays silent, its instance moves on (see `BlsTransport`)."""
        if self._abandoned:
            return
        self._abandoned = True
        cancel = getattr(self._iterator, "cancel", None)
        if cancel is not None:
            cancel()
        if self._silence_timeout:
            self._loop.call_soon_threadsafe(self._watch_silence)

    def _watch_silence(self) -> None:
        """On the loop, while the abandoned stream is being read to its end."""
        silent_for = time.monotonic() - self._last_response
        if silent_for >= self._silence_timeout:
            log.warning("an abandoned BLS stream stayed silent for %.0f s; this instance takes the next one", silent_for)
            self._slot.release()
        elif self._slot._held:
            self._loop.call_later(self._silence_timeout - silent_for, self._watch_silence)

    async def released(self) -> None:
        return  # the reader thread finishes the stream by itself

    def cancel_hook(self):
        return self.abandon


def _code_names() -> dict:
    errors = pb().TritonError
    names = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED")
    return {getattr(errors, name): name for name in names if hasattr(errors, name)}


class _RetiredIterators:
    """Keeps finished BLS response iterators alive for a few seconds.

    The Python backend stub forgets a BLS stream in two places: its own map, emptied by a C++
    thread after the iterator has seen the final response, and the Python object. Whichever
    lets go last destroys the stream's responses. When that is the C++ thread, the responses'
    NumPy arrays are released without the GIL, which corrupted the interpreter's memory and
    crashed the stub (SIGSEGV) under concurrent streams (Triton 2.51). Holding the Python
    object until the C++ side has surely let go makes the last release a Python one, with the
    GIL. The same reason makes every stream be read to its end: an iterator dropped before its
    final response stays in the stub's map for good.
    """

    HOLD_S = 5.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[tuple[float, object]] = []

    def add(self, iterator) -> None:
        now = time.monotonic()
        with self._lock:
            self._held.append((now, iterator))
            keep = next((i for i, (t, _) in enumerate(self._held) if now - t < self.HOLD_S), len(self._held))
            released, self._held = self._held[:keep], self._held[keep:]
        del released  # dropped here, in a Python thread holding the GIL

    def clear(self) -> None:
        """Releases every held iterator (at finalize, while the stub's shared memory is there)."""
        with self._lock:
            released, self._held = self._held, []
        del released


_retired = _RetiredIterators()


@register_transport("bls")
def bls_transport(settings) -> BlsTransport:
    return BlsTransport(settings.target_model, settings.target_model_version, settings.idle_timeout_s)
