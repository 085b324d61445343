"""Live fuzzing of `openai_chat`: thousands of generated bad (and good) requests over HTTP and gRPC.

    python tools/fuzz.py                      # starts a server with the scripted model, 10,000 requests
    python tools/fuzz.py --url 127.0.0.1:8000 --grpc-url 127.0.0.1:8001 --model openai_chat

Every request must get either a 4xx OpenAI error or a valid response (a `chat.completion`, or
chunks ending in FINAL); the server and every model stub must stay up, and the server log must
hold no unhandled exception. Kinds of requests (each seeded, reproducible):
- HTTP `generate` / `generate_stream`: valid requests, mutations of them (wrong types, extreme
  numbers, huge and deeply nested values, empty and huge arrays, unknown roles and part types,
  unknown fields), malformed and truncated JSON, invalid UTF-8, a body that is not an object;
- gRPC streaming (tritonclient): wrong input names, shapes, datatypes and batch sizes, several
  bodies in one tensor, raw and invalid UTF-8 bytes (Triton itself refuses tensors the model does
  not declare: counted as "refused-by-triton").
Prints counts by kind and outcome as JSON; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.bench.paths import generate_body  # noqa: E402
from tritonchat.sse import events  # noqa: E402

VALID = {
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
    "max_completion_tokens": 4,
}
EXTREMES = [0, -1, 1, 2**31, -(2**31), 2**63, -(2**63) - 1, 2**64, 10**30, 1e308, -1e308, 1.5, 0.0, -0.0, 1e-300,
            "1", "", "x" * 10, None, True, False, [], {}, [1, 2], {"a": 1}]
FIELDS = ["model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "n",
          "seed", "stop", "stream", "stream_options", "logprobs", "top_logprobs", "logit_bias", "response_format",
          "tools", "tool_choice", "parallel_tool_calls", "presence_penalty", "frequency_penalty", "user",
          "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "min_tokens", "stop_token_ids",
          "ignore_eos", "metadata", "store", "unknown_field"]


def mutate(rng: random.Random) -> tuple[str, bytes]:
    """(kind, body bytes) of one generated request body."""
    request = copy.deepcopy(VALID)
    choice = rng.randrange(16)
    if choice == 0:
        return "valid", json.dumps({**request, "stream": rng.random() < 0.5}).encode()
    if choice == 1:
        request[rng.choice(FIELDS)] = rng.choice(EXTREMES)
        kind = "wrong-type-or-range"
    elif choice == 2:
        message = rng.choice(request["messages"])
        message[rng.choice(["role", "content", "name", "tool_calls", "tool_call_id"])] = rng.choice(
            EXTREMES + ["robot", "function", [{"type": "image_url", "image_url": {"url": "x"}}],
                        [{"type": "text"}], [{"type": "text", "text": 5}]])
        kind = "bad-message"
    elif choice == 3:
        request["messages"] = rng.choice([[], [{}], [None], "hello", [{"role": "user"}] * 3])
        kind = "bad-messages"
    elif choice == 4:
        depth = rng.choice([10, 100, 1000, 5000])
        field = rng.choice(["metadata", "chat_template_kwargs", "logit_bias", "tools", "response_format"])
        opening = "".join('{"k": ' if i % 2 else "[" for i in range(depth))
        closing = "".join("}" if i % 2 else "]" for i in reversed(range(depth)))
        text = json.dumps(request)[:-1] + f', "{field}": ' + opening + '"x"' + closing + "}"
        return "deeply-nested", text.encode()
    elif choice == 5:
        request["messages"][-1]["content"] = "x" * rng.choice([10_000, 1_000_000])
        kind = "huge-content"
    elif choice == 6:
        request["messages"] = request["messages"] * rng.choice([1000, 20_000])
        kind = "huge-array"
    elif choice == 7:
        request["stop"] = ["s"] * rng.choice([0, 17, 1000])
        kind = "stop-lists"
    elif choice == 8:
        request.update(tools=[{"type": "function", "function": {"name": rng.choice(["f", "", "a b", "x" * 100]),
                                                                 "parameters": rng.choice([{}, [], "x", None])}}],
                       tool_choice=rng.choice(["auto", "required", "none", {"type": "function", "function": {"name": "g"}},
                                               5]))
        kind = "tools"
    elif choice == 9:
        text = json.dumps(request)
        return "truncated-json", text[: rng.randrange(len(text))].encode()
    elif choice == 10:
        text = bytearray(json.dumps(request).encode())
        for _ in range(rng.randint(1, 5)):
            text[rng.randrange(len(text))] = rng.randrange(256)
        return "corrupted-bytes", bytes(text)
    elif choice == 11:
        return "invalid-utf8", json.dumps(request).encode().replace(b"Hello", b"Hel\xff\xfelo")
    elif choice == 12:
        return "not-an-object", json.dumps(rng.choice([[], "x", 5, None, [VALID]])).encode()
    elif choice == 13:
        request["n"] = rng.choice([2, 128, 129])
        request["max_completion_tokens"] = rng.choice([1, 10**9])
        kind = "big-n-or-budget"
    elif choice == 14:
        request["logit_bias"] = {str(i): 1.0 for i in range(rng.choice([1, 300, 5000]))}
        kind = "logit-bias-size"
    else:
        request["messages"][-1]["content"] = "".join(chr(rng.randrange(0x20, 0x10FFFF)) for _ in range(50)
                                                     ).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        kind = "unicode"
    return kind, json.dumps(request).encode()


def http_outcome(status: int, body: bytes, stream: bool) -> str:
    """'ok', '4xx', or a failure description."""
    text = body.decode("utf-8", "replace")
    if stream:
        found = list(events(text.splitlines()))
        errors = [e["error"] for e in found if "error" in e]
        if errors:
            return _error_outcome(errors[0], status)
        chunks = [json.loads(e["response"]) for e in found]
        return "ok" if chunks and all(c.get("object") == "chat.completion.chunk" for c in chunks) else "bad-stream"
    data = json.loads(text)
    if "error" in data:
        return _error_outcome(data["error"], status)
    return "ok" if json.loads(data["response"]).get("object") == "chat.completion" else "bad-response"


def _error_outcome(message: str, status: int) -> str:
    try:
        error = json.loads(message)["error"]
    except (ValueError, KeyError, TypeError):
        return f"not-openai-error({status}): {message[:80]}"
    if error.get("type") == "invalid_request_error" and status in (400, 404):
        return "4xx"
    return f"{status} {error.get('type')}: {error.get('message', '')[:80]}"


async def http_fuzz(url: str, model: str, count: int, seed: int, concurrency: int, results: Counter,
                    failures: list) -> None:
    import aiohttp  # noqa: PLC0415

    rng = random.Random(seed)
    jobs = []
    for i in range(count):
        kind, body = mutate(rng)
        stream = b'"stream": true' in body
        jobs.append((i, kind, body, stream))
    queue: asyncio.Queue = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)

    async def worker(session):
        while not queue.empty():
            i, kind, body, stream = queue.get_nowait()
            endpoint = "generate_stream" if stream else "generate"
            # The body rides inside the generate JSON as a string, which must be text: bytes that
            # are not UTF-8 go as their Latin-1 reading here (raw bytes reach the model over gRPC).
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                text = body.decode("latin-1")
            payload = json.dumps(generate_body(text)).encode("utf-8")
            try:
                async with session.post(f"http://{url}/v2/models/{model}/{endpoint}", data=payload) as response:
                    outcome = http_outcome(response.status, await response.read(), stream)
            except Exception as exc:  # noqa: BLE001
                outcome = f"client error: {type(exc).__name__}: {exc}"[:120]
            results[(f"http/{kind}", outcome if outcome in ("ok", "4xx") else "FAIL")] += 1
            if outcome not in ("ok", "4xx"):
                failures.append({"request": i, "kind": kind, "outcome": outcome, "body": body[:300].decode("latin-1")})

    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))


def grpc_stream_fuzz(grpc_url: str, model: str, count: int, seed: int, results: Counter, failures: list) -> None:
    """The same tensors over the streaming API (the one decoupled models answer)."""
    import queue  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415
    import tritonclient.grpc as grpcclient  # noqa: PLC0415

    rng = random.Random(seed + 1)
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    valid = json.dumps(VALID).encode()
    shapes = {
        "wrong-name": lambda: [("prompt", np.array([valid], dtype=np.object_), "BYTES")],
        "no-input": lambda: [],
        "two-bodies": lambda: [("request", np.array([valid, valid], dtype=np.object_), "BYTES")],
        "empty-tensor": lambda: [("request", np.array([], dtype=np.object_), "BYTES")],
        "2d-shape": lambda: [("request", np.array([[valid]], dtype=np.object_), "BYTES")],
        "batch-of-2": lambda: [("request", np.array([[valid], [valid]], dtype=np.object_), "BYTES")],
        "int-dtype": lambda: [("request", np.array([7], dtype=np.int32), "INT32")],
        "fp32-dtype": lambda: [("request", np.array([0.5], dtype=np.float32), "FP32")],
        "raw-bytes": lambda: [("request", np.array([bytes(rng.randrange(256) for _ in range(60))], dtype=np.object_),
                               "BYTES")],
        "invalid-utf8": lambda: [("request", np.array([valid.replace(b"Hello", b"Hel\xff\xfelo")], dtype=np.object_),
                                  "BYTES")],
        "extra-input": lambda: [("request", np.array([valid], dtype=np.object_), "BYTES"),
                                ("other", np.array([1], dtype=np.int32), "INT32")],
        "valid": lambda: [("request", np.array([valid], dtype=np.object_), "BYTES")],
    }
    for i in range(count):
        kind = rng.choice(list(shapes))
        inputs = []
        for name, value, datatype in shapes[kind]():
            tensor = grpcclient.InferInput(name, list(value.shape), datatype)
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        client.async_stream_infer(model, inputs, request_id=str(i), enable_empty_final_response=True)
        outcome = None
        while outcome is None:
            try:
                result, error = answers.get(timeout=60)
            except queue.Empty:
                outcome = "no answer in 60 s"
                break
            if error is not None:
                outcome = _grpc_error_outcome(error.message() or "")
            elif result.get_response().parameters["triton_final_response"].bool_param:
                outcome = "ok"
        results[(f"grpc-stream/{kind}", outcome if outcome in ("ok", "4xx", "refused-by-triton") else "FAIL")] += 1
        if outcome not in ("ok", "4xx", "refused-by-triton"):
            failures.append({"request": i, "kind": kind, "outcome": outcome})
    client.stop_stream()
    client.close()


def _grpc_error_outcome(message: str) -> str:
    """Our OpenAI error (a 4xx), Triton's own refusal of tensors the model does not declare, or a failure."""
    try:
        error = json.loads(message)["error"]
    except (ValueError, KeyError, TypeError):
        triton_refusals = ("expects", "unexpected", "data-type", "shape", "expected")
        return "refused-by-triton" if any(word in message for word in triton_refusals) else f"error: {message[:100]}"
    return "4xx" if error.get("type") == "invalid_request_error" else f"error: {error}"[:120]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="HTTP host:port of a running server (default: start one)")
    parser.add_argument("--grpc-url", help="its gRPC host:port")
    parser.add_argument("--model", default="chat_scripted")
    parser.add_argument("--http-requests", type=int, default=8000)
    parser.add_argument("--grpc-requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the summary JSON here too")
    args = parser.parse_args(argv)

    server = None
    if args.url is None:
        from harness.bench.servers import scripted_server  # noqa: PLC0415

        server = scripted_server(args.model, prefix="fuzz-repo-")
        server.start()
        server.wait_ready(timeout=300)
        args.url, args.grpc_url = server.http_url, server.grpc_url
    results: Counter = Counter()
    failures: list = []
    started = time.monotonic()
    try:
        asyncio.run(http_fuzz(args.url, args.model, args.http_requests, args.seed, args.concurrency, results, failures))
        grpc_stream_fuzz(args.grpc_url, args.model, args.grpc_requests, args.seed, results, failures)
        from harness.storm import server_answers  # noqa: PLC0415

        alive = server_answers(args.url, args.model)
        log_problems = []
        if server is not None:
            log = (server.log_path.read_text(errors="replace")).splitlines()
            log_problems = [line[:200] for line in log if "Traceback" in line or "Signal (" in line
                            or "ERROR:" in line or "is not healthy" in line][:20]
    finally:
        if server is not None:
            server.stop()
    by_kind: dict[str, dict[str, int]] = {}
    for (kind, outcome), n in sorted(results.items()):
        by_kind.setdefault(kind, {})[outcome] = n
    summary = {
        "requests": sum(results.values()),
        "seconds": round(time.monotonic() - started, 1),
        "outcomes": dict(sum((Counter({o: n}) for (_, o), n in results.items()), Counter())),
        "by_kind": by_kind,
        "server_answers_after": alive,
        "log_problems": log_problems,
        "failures": failures[:30],
    }
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if alive and not failures and not log_problems else 1


if __name__ == "__main__":
    sys.exit(main())
