"""Disconnect storm: streaming clients that drop their connection at random points.

    python tools/storm.py --url 127.0.0.1:8000 --model openai_chat --streams 1000 --concurrency 64

Each client opens an HTTP `generate_stream` request for `--max-tokens` tokens (ignore_eos),
reads a random number of events (0 to `--max-events`, or the whole stream with probability
`--complete-fraction`) and closes its connection. Afterwards the server must still answer a
normal request. Prints a JSON summary; exits non-zero if the server died or stopped
answering, or a completed stream was wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import urllib.request

from tritonchat.sse import data_of


def chat_body(max_tokens: int, content: str = "Tell me a long story.") -> bytes:
    request = {
        "messages": [{"role": "user", "content": content}],
        "stream": True,
        "max_completion_tokens": max_tokens,
        "ignore_eos": True,
    }
    return json.dumps({"request": json.dumps(request)}).encode()


async def one_stream(session, url: str, body: bytes, drop_after: int | None, timeout: float,
                     drop_after_s: float | None = None, seen: list | None = None, gaps: list | None = None) -> str:
    """Outcome: 'dropped', 'completed', 'error' or 'timeout'. What a failing stream saw (a
    status and body, an error event, an exception) is appended to `seen`; the longest wait for
    an event (from the request to the first, or between two) to `gaps`, for streams that got one."""
    seen = seen if seen is not None else []
    gaps = gaps if gaps is not None else []
    import aiohttp  # noqa: PLC0415

    if drop_after_s is not None:
        # Dropped after a time, possibly before any response (also before the headers).
        try:
            async with asyncio.timeout(drop_after_s):
                return await one_stream(session, url, body, None, timeout, seen=seen, gaps=gaps)
        except TimeoutError:
            return "dropped"
    events = 0
    last = time.monotonic()
    longest = 0.0
    try:
        async with asyncio.timeout(timeout):
            async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
                if response.status != 200:
                    seen.append(f"status {response.status}: {(await response.text())[:300]}")
                    return "error"
                if drop_after == 0:
                    response.close()
                    return "dropped"
                async for line in response.content:
                    payload = data_of(line)
                    if payload is None:
                        continue
                    events += 1
                    now = time.monotonic()
                    longest, last = max(longest, now - last), now
                    if payload.startswith(b'{"error"'):
                        seen.append(f"after {events - 1} events: {payload[:300].decode(errors='replace')}")
                        return "error"
                    if drop_after is not None and events >= drop_after:
                        response.close()  # drops the connection mid-stream
                        return "dropped"
        return "completed"
    except TimeoutError:
        seen.append(f"timeout after {events} events")
        return "timeout"
    except aiohttp.ClientError as exc:
        seen.append(f"after {events} events: {type(exc).__name__}: {exc}")
        return "error"
    finally:
        if events:
            gaps.append(longest)


async def storm(url: str, model: str, streams: int, concurrency: int, max_tokens: int, max_events: int,
                complete_fraction: float, seed: int, timeout: float, body: bytes | None = None,
                timed_fraction: float = 0.0, max_drop_s: float = 0.1) -> dict:
    import aiohttp  # noqa: PLC0415

    rng = random.Random(seed)
    endpoint = f"http://{url}/v2/models/{model}/generate_stream"
    body = body or chat_body(max_tokens)
    outcomes: dict[str, int] = {}
    seen: list[str] = []
    gaps: list[float] = []
    issued = 0

    async def worker(session):
        nonlocal issued
        while issued < streams:
            issued += 1
            drop_after = None if rng.random() < complete_fraction else rng.randint(0, max_events)
            drop_after_s = rng.uniform(0, max_drop_s) if drop_after is not None and rng.random() < timed_fraction else None
            outcome = await one_stream(session, endpoint, body, drop_after, timeout, drop_after_s, seen, gaps)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

    start = time.monotonic()
    # force_close: a connection is never reused, so closing one always drops its stream.
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    result = {"streams": streams, "outcomes": outcomes, "seconds": round(time.monotonic() - start, 1)}
    if gaps:
        gaps.sort()
        result["longest_wait_s"] = {"p50": round(gaps[len(gaps) // 2], 3), "p99": round(gaps[int(len(gaps) * 0.99)], 3),
                                    "max": round(gaps[-1], 3)}
    if seen:
        result["failures"] = seen[:10]
    return result


def server_answers(url: str, model: str, timeout: float = 30.0) -> bool:
    """A normal non-streaming request still gets a chat.completion."""
    request = {"messages": [{"role": "user", "content": "Hello"}], "max_completion_tokens": 4}
    data = json.dumps({"request": json.dumps(request)}).encode()
    try:
        with urllib.request.urlopen(f"http://{url}/v2/models/{model}/generate", data=data, timeout=timeout) as r:
            return json.loads(json.loads(r.read())["response"])["object"] == "chat.completion"
    except Exception:  # noqa: BLE001
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="127.0.0.1:8000", help="Triton HTTP host:port")
    parser.add_argument("--model", default="openai_chat")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-events", type=int, default=20, help="drop after 0..N events")
    parser.add_argument("--complete-fraction", type=float, default=0.0, help="share of clients that read to the end")
    parser.add_argument("--timed-fraction", type=float, default=0.0,
                        help="share of dropping clients that drop after a random time instead (maybe before any event)")
    parser.add_argument("--max-drop-s", type=float, default=0.1, help="longest such time, seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0, help="per stream, seconds")
    args = parser.parse_args(argv)
    result = asyncio.run(
        storm(args.url, args.model, args.streams, args.concurrency, args.max_tokens, args.max_events,
              args.complete_fraction, args.seed, args.timeout, timed_fraction=args.timed_fraction,
              max_drop_s=args.max_drop_s)
    )
    result["server_answers_after"] = server_answers(args.url, args.model)
    print(json.dumps(result))
    bad = result["outcomes"].get("timeout", 0) + result["outcomes"].get("error", 0)
    return 0 if result["server_answers_after"] and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
