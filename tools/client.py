"""Chat with `openai_chat` from the command line, over gRPC streaming or HTTP.

    python tools/client.py "Tell me a story" --max-tokens 64
    python tools/client.py "Hi" --protocol http --no-stream
    python tools/client.py --request '{"messages": [{"role": "user", "content": "Hi"}], "temperature": 0}'
"""

from __future__ import annotations

import argparse
import json
import queue
import sys

import numpy as np


def build_request(args) -> dict:
    if args.request:
        request = json.loads(args.request)
    else:
        messages = [{"role": "system", "content": args.system}] if args.system else []
        messages.append({"role": "user", "content": args.prompt})
        request = {"messages": messages}
        if args.max_tokens:
            request["max_completion_tokens"] = args.max_tokens
        if args.temperature is not None:
            request["temperature"] = args.temperature
    request["stream"] = args.stream
    return request


def print_payload(payload: dict) -> None:
    if payload.get("object") == "chat.completion":
        print(payload["choices"][0]["message"]["content"])
        print(f"\n[finish_reason={payload['choices'][0]['finish_reason']} usage={payload['usage']}]", file=sys.stderr)
        return
    for choice in payload["choices"]:
        print(choice["delta"].get("content") or "", end="", flush=True)
        if choice["finish_reason"]:
            print(f"\n[finish_reason={choice['finish_reason']}]", file=sys.stderr)


def chat_grpc(url: str, model: str, request: dict) -> int:
    import tritonclient.grpc as grpcclient  # noqa: PLC0415

    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        tensor = grpcclient.InferInput("request", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([json.dumps(request).encode()], dtype=np.object_))
        client.async_stream_infer(model, [tensor], enable_empty_final_response=True)
        while True:
            result, error = responses.get()
            if error is not None:
                print(f"error: {error.message()}", file=sys.stderr)
                return 1
            response = result.get_response()
            if response.outputs:
                print_payload(json.loads(result.as_numpy("response")[0]))
            if response.parameters["triton_final_response"].bool_param:
                return 0
    finally:
        client.stop_stream()
        client.close()


def chat_http(url: str, model: str, request: dict) -> int:
    import requests  # noqa: PLC0415

    body = {"request": json.dumps(request)}
    endpoint = "generate_stream" if request["stream"] else "generate"
    with requests.post(f"http://{url}/v2/models/{model}/{endpoint}", json=body, stream=True, timeout=600) as r:
        for line in r.iter_lines():
            if not line:
                continue
            event = json.loads(line[len(b"data: ") :] if line.startswith(b"data: ") else line)
            if "error" in event:
                print(f"error (HTTP {r.status_code}): {event['error']}", file=sys.stderr)
                return 1
            print_payload(json.loads(event["response"]))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompt", nargs="?", default="Hello!")
    parser.add_argument("--request", help="a whole request body (JSON) instead of a prompt")
    parser.add_argument("--system")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--no-stream", dest="stream", action="store_false")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc")
    parser.add_argument("--url", help="default localhost:8001 (gRPC) or localhost:8000 (HTTP)")
    parser.add_argument("--model", default="openai_chat", help="the Triton model name")
    args = parser.parse_args()
    request = build_request(args)
    if args.protocol == "grpc":
        return chat_grpc(args.url or "localhost:8001", args.model, request)
    return chat_http(args.url or "localhost:8000", args.model, request)


if __name__ == "__main__":
    sys.exit(main())
