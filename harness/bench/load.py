"""The load generator: streamed requests from a closed loop of clients, and what each one saw.

Triton paths stream over Triton's HTTP `generate_stream` (server-sent events); OpenAI servers
(the gateway, vLLM's own) over their `/v1/chat/completions`. Events are read with
`tritonchat.sse.EventReader` on the raw pieces of the body, which keeps the client cheap.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from harness.bench import BenchError
from tritonchat.sse import DONE, EventReader

_DONE = DONE.encode()  # what OpenAI servers close a stream with


@dataclass
class RequestResult:
    """What the client saw of one streamed request (times in seconds, perf_counter clock)."""

    start: float
    end: float
    first_event: float | None = None  # arrival of the first event of any kind (chat: the role chunk)
    text_times: list[float] = field(default_factory=list)  # arrival of each text-carrying event
    tokens: int = 0
    prompt_tokens: int | None = None

    @property
    def ttft(self) -> float | None:
        return self.text_times[0] - self.start if self.text_times else None

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.text_times, self.text_times[1:])]

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first event: robust to chunks holding several tokens."""
        if len(self.text_times) < 2 or self.tokens < 2:
            return None
        return (self.text_times[-1] - self.text_times[0]) / (self.tokens - 1)


# ---- events of the paths (pure) ----------------------------------------------------------------


@dataclass
class Event:
    text: str = ""
    tokens: int | None = None  # completion tokens this event reports (raw: delta; chat: usage total)
    prompt_tokens: int | None = None


def _error(path: str, message) -> BenchError:
    return BenchError(f"{path}: error response: {message}")


def _scalar(value):
    """A generate-extension output value: a scalar, or a one-element list for shaped tensors."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


def parse_raw_event(event: dict) -> Event:
    """One `generate_stream` event of the vLLM-interface model (text is a delta)."""
    if "error" in event:
        raise _error("raw", event["error"])
    tokens = _scalar(event.get("num_output_tokens"))
    prompt = _scalar(event.get("num_input_tokens"))
    return Event(
        text=_scalar(event.get("text_output")) or "",
        tokens=None if tokens is None else int(tokens),
        prompt_tokens=None if prompt is None else int(prompt),
    )


def parse_chat_event(event: dict) -> Event:
    """One `generate_stream` event of `openai_chat`: a `chat.completion.chunk` in `response`."""
    if "error" in event:
        raise _error("chat", event["error"])
    return parse_chunk(json.loads(event["response"]))


def parse_gateway_event(event: dict) -> Event:
    """One server-sent event of the OpenAI-compatible gateway: the chunk itself."""
    if "error" in event:
        raise _error("gateway", event["error"])
    return parse_chunk(event)


def parse_chunk(chunk: dict) -> Event:
    text = "".join(choice["delta"].get("content") or "" for choice in chunk.get("choices") or ())
    usage = chunk.get("usage")
    if usage:
        return Event(text=text, tokens=usage["completion_tokens"], prompt_tokens=usage["prompt_tokens"])
    return Event(text=text)


@dataclass
class Target:
    """One path of a pair: a model and the exact body sent to it.

    `kind` says how its stream reads: `raw` (the generation model's `generate_stream`), `chat`
    (`openai_chat`'s `generate_stream`: a chunk in `response`) or `openai` (OpenAI server-sent
    events: the gateway, vLLM's own server)."""

    pair: str  # "vllm" or "scripted"
    side: str  # "raw", "chat http", "chat grpc si=4", "vllm serve", "gateway"...
    model: str
    body: dict
    url: str = ""  # where to POST; default: the model's generate_stream on the server
    kind: str = ""

    def __post_init__(self):
        if not self.kind:
            self.kind = "raw" if self.side == "raw" else "chat" if self.side.startswith("chat") else "openai"

    @property
    def parse(self):
        return {"raw": parse_raw_event, "chat": parse_chat_event, "openai": parse_gateway_event}[self.kind]

    @property
    def sums_tokens(self) -> bool:
        """Raw events report token deltas to add up; chat reports the total once, in its usage chunk."""
        return self.kind == "raw"


# ---- the load generator -----------------------------------------------------------------------


async def _payloads(content):
    """The `data` payloads of a response body as its pieces arrive."""
    reader = EventReader()
    async for piece in content.iter_any():
        for data in reader.feed(piece):
            yield data
    for data in reader.feed(b"\n\n"):  # an event the body ended without its blank line
        yield data


async def stream_one(session, base_url: str, target: Target, payload: bytes, expect_tokens: int) -> RequestResult:
    url = target.url or f"{base_url}/v2/models/{target.model}/generate_stream"
    parse = target.parse
    start = time.perf_counter()
    result = RequestResult(start=start, end=start)
    tokens = 0
    async with session.post(url, data=payload, headers={"Content-Type": "application/json"}) as response:
        if response.status != 200:
            raise BenchError(f"{target.side} {target.model}: HTTP {response.status}: {(await response.text())[:500]}")
        async for data in _payloads(response.content):
            if data == _DONE:
                continue
            now = time.perf_counter()
            if result.first_event is None:
                result.first_event = now
            event = parse(json.loads(data))
            if event.text:
                result.text_times.append(now)
            if event.tokens is not None:
                tokens = tokens + event.tokens if target.sums_tokens else event.tokens
            if event.prompt_tokens is not None:
                result.prompt_tokens = event.prompt_tokens
    result.end = time.perf_counter()
    result.tokens = tokens
    if tokens != expect_tokens or not result.text_times:
        raise BenchError(
            f"{target.side} {target.model}: expected {expect_tokens} tokens, got {tokens} "
            f"in {len(result.text_times)} text events"
        )
    return result


async def run_load(session, base_url: str, target: Target, concurrency: int, total: int, expect_tokens: int):
    """Closed loop: `concurrency` workers send requests back to back until `total` are done."""
    payload = json.dumps(target.body).encode()
    results: list[RequestResult] = []
    issued = 0

    async def worker():
        nonlocal issued
        while issued < total:
            issued += 1
            results.append(await stream_one(session, base_url, target, payload, expect_tokens))

    start = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, total))]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return results, time.perf_counter() - start
