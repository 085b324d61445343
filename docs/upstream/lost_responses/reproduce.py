"""Reproducer: streamed responses lost when a decoupled Python model sends them from many threads.

Starts tritonserver with ./models and runs ROUNDS rounds; each sends STREAMS requests to each
model, CONCURRENCY at a time, over HTTP `generate_stream` and over gRPC `ModelStreamInfer`, and
counts per stream the responses that arrive (COUNT expected, the last with FINAL):
  streamer         every request's COUNT responses sent from a thread of its own
  streamer_single  every response of the model sent from one thread
Prints one line per (round, protocol, model): how many streams were whole, and how the others
ended (`ended after N`: the server ended the HTTP body after N of the COUNT responses; a
timeout: it never ended). HTTP is read from a plain socket, its chunked encoding decoded here, so
a count is what the server wrote. Exit code 1 when any stream was not whole.

    .venv/bin/python docs/upstream/lost_responses/reproduce.py            # in this repository
    python reproduce.py --tritonserver /opt/tritonserver/bin/tritonserver  # elsewhere
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # this repository's harness, when run from it


async def http_stream(port: int, model: str, count: int, interval_ms: int) -> str:
    """One `generate_stream` request over a plain socket, its chunked body decoded here, so that
    what is seen is what the server wrote: `whole`, or `ended after N` (the server ended the
    body, `0\\r\\n\\r\\n`, after N of the COUNT events), `closed after N`, `timeout`, ..."""
    body = json.dumps({"COUNT": count, "INTERVAL_MS": interval_ms}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"POST /v2/models/{model}/generate_stream HTTP/1.1\r\nHost: localhost\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     "Connection: close\r\n\r\n".encode() + body)
        async with asyncio.timeout(60):
            head = await reader.readuntil(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n", 1)[0]:
                return "status " + head.split(b"\r\n", 1)[0].decode(errors="replace")
            data, ended = b"", False
            while size_line := await reader.readline():
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    ended = True
                    break
                data += await reader.readexactly(size + 2)
        seen = data.count(b"data:")
        if b'"error"' in data:
            return "error event"
        return "whole" if seen == count and ended else f"{'ended' if ended else 'closed'} after {seen}"
    except TimeoutError:
        return "timeout"
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__
    finally:
        writer.close()


async def grpc_stream(client, model: str, count: int, interval_ms: int) -> str:
    import numpy as np
    import tritonclient.grpc as grpcclient

    tensors = []
    for name, value in (("COUNT", count), ("INTERVAL_MS", interval_ms)):
        tensor = grpcclient.InferInput(name, [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        tensors.append(tensor)

    async def requests():
        yield {"model_name": model, "inputs": tensors}

    seen = 0
    try:
        async with asyncio.timeout(60):
            async for result, error in client.stream_infer(requests()):
                if error is not None:
                    return "error"
                seen += 1
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
    except TimeoutError:
        return "timeout"
    return "whole" if seen == count else f"ended after {seen}"


async def run(protocol: str, server, model: str, args) -> dict:
    outcomes: dict[str, int] = {}
    limit = asyncio.Semaphore(args.concurrency)
    client = None
    if protocol == "http":
        one = lambda: http_stream(server.http_port, model, args.count, args.interval_ms)  # noqa: E731
    else:
        import tritonclient.grpc.aio as grpcaio

        client = grpcaio.InferenceServerClient(server.grpc_url)
        one = lambda: grpc_stream(client, model, args.count, args.interval_ms)  # noqa: E731

    async def limited():
        async with limit:
            outcome = await one()
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

    await asyncio.gather(*(limited() for _ in range(args.streams)))
    if client is not None:
        await client.close()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--streams", type=int, default=1024, help="per round, protocol and model")
    parser.add_argument("--count", type=int, default=64, help="responses per stream")
    parser.add_argument("--interval-ms", type=int, default=2)
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--tritonserver", help="path of tritonserver (default: this repository's harness)")
    args = parser.parse_args(argv)

    from harness.server import TritonServer, free_port  # the harness also finds pytriton's Triton

    repo = Path(tempfile.mkdtemp(prefix="lost-responses-")) / "models"
    shutil.copytree(HERE / "models", repo, symlinks=False)
    server = TritonServer(repo, free_port(), free_port(), free_port(), log_path=repo.parent / "server.log")
    if args.tritonserver:
        import harness.server as local  # noqa: PLC0415

        local.server_binary = lambda: Path(args.tritonserver)
    lost = 0
    with server:
        for round_ in range(args.rounds):
            for protocol in args.protocols.split(","):
                for model in ("streamer", "streamer_single"):
                    started = time.monotonic()
                    outcomes = asyncio.run(run(protocol, server, model, args))
                    lost += sum(n for outcome, n in outcomes.items() if outcome != "whole")
                    print(f"round {round_} {protocol:4} {model:15} {json.dumps(outcomes)} "
                          f"{time.monotonic() - started:.1f} s", flush=True)
    print(f"server log: {repo.parent / 'server.log'}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
