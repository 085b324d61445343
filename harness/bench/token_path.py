"""Micro-benchmark of `openai_chat`'s per-token path, without a server: one generation
model response in, the bytes of the chunk(s) it becomes out.

Per token, timed separately (CPU time of this process, `time.thread_time_ns`):
- receive: what the transport does with one response of Triton's vLLM backend: the gRPC
  transport parses a `ModelStreamInferResponse` message from its bytes and decodes its output
  tensors; the HTTP transport parses one `generate_stream` event's JSON;
- parse:   the request format's decoder (`vllm`) turns the tensors into a `GenerationOutput`;
- build:   the response builder turns it into `chat.completion.chunk` JSON (with the hermes and
  qwen3 parsers when `--parsers` is set);
- send:    what `TritonSink.send` does before Triton's response sender takes over (the payload
  encoded into a numpy BYTES tensor and an `InferenceResponse`); the sender itself is a no-op
  here: its round trip to the server is what this tool cannot see.

    .venv/bin/python tools/bench_token_path.py [--tokens 2000] [--rounds 7] [--transport grpc|http] [--parsers]

Prints the median µs per token of each part over the rounds, with the range. Use it to catch
regressions of the chat layer's own cost; the server-level comparison is tools/bench.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import types
from pathlib import Path

import numpy as np

from harness.bench.paths import DEFAULT_TOKENIZER
from tritonchat.service import ChatService
from tritonchat.settings import Settings
from tritonchat.transports.grpc import encode_tensor, response_outputs
from tritonchat.transports.http import event_outputs
from tritonchat.triton import sink as sink_module

STAGES = ("receive", "parse", "build", "send")
WORDS = [" the", " river", " flows", " to", " the", " sea", ",", " 你好", " 🎉", " and"]


class _FakeTritonUtils(types.SimpleNamespace):
    """The parts of triton_python_backend_utils that TritonSink uses, with the same work on
    our side (numpy tensors wrapped into objects); `send` does nothing."""


def fake_pb_utils():
    class Tensor:
        def __init__(self, name, array):
            self.name, self.array = name, array

    class InferenceResponse:
        def __init__(self, output_tensors=None, error=None):
            self.output_tensors, self.error = output_tensors, error

    return _FakeTritonUtils(Tensor=Tensor, InferenceResponse=InferenceResponse, TRITONSERVER_RESPONSE_COMPLETE_FINAL=1)


class _Sender:
    def send(self, response, flags=0):
        pass


class _Request:
    def __init__(self, sender=None):
        self.sender = sender or _Sender()

    def get_response_sender(self):
        return self.sender

    def is_cancelled(self):
        return False


def make_sink(sender=None) -> sink_module.TritonSink:
    """A TritonSink outside Triton: the fake utilities only while it is made (it keeps them),
    so nothing else in this process sees them."""
    real = sink_module.pb
    sink_module.pb = fake_pb_utils
    try:
        return sink_module.TritonSink(_Request(sender))
    finally:
        sink_module.pb = real


def backend_outputs(tokens: int) -> list[dict[str, np.ndarray]]:
    """What Triton's vLLM backend sends per token for a streamed request (the outputs openai_chat asks for)."""
    outputs = []
    for i in range(tokens):
        last = i == tokens - 1
        outputs.append({
            "text_output": np.array([WORDS[i % len(WORDS)].encode()], dtype=np.object_),
            "finish_reason": np.array([b"length" if last else b"None"], dtype=np.object_),
            "num_input_tokens": np.array([12], dtype=np.uint32),
            "num_output_tokens": np.array([1], dtype=np.uint32),
        })
    return outputs


def grpc_messages(outputs: list[dict[str, np.ndarray]]) -> list[bytes]:
    from tritonclient.grpc import service_pb2  # noqa: PLC0415

    messages = []
    for out in outputs:
        message = service_pb2.ModelStreamInferResponse()
        response = message.infer_response
        response.model_name = "vllm_model"
        response.id = "bench"
        for name, value in out.items():
            datatype, raw = encode_tensor(value)
            tensor = response.outputs.add()
            tensor.name, tensor.datatype = name, datatype
            tensor.shape.extend(value.shape)
            response.raw_output_contents.append(raw)
        messages.append(message.SerializeToString())
    return messages


def http_events(outputs: list[dict[str, np.ndarray]]) -> list[bytes]:
    events = []
    for out in outputs:
        event = {"model_name": "vllm_model", "model_version": "1"}
        for name, value in out.items():
            item = value.reshape(-1)[0]
            event[name] = item.decode() if isinstance(item, bytes) else item.item()
        events.append(json.dumps(event).encode())
    return events


def make_receive(transport: str, outputs: list[dict[str, np.ndarray]]):
    if transport == "grpc":
        from tritonclient.grpc import service_pb2  # noqa: PLC0415

        parse = service_pb2.ModelStreamInferResponse.FromString

        def receive(raw: bytes) -> dict:
            return response_outputs(parse(raw).infer_response)

        return grpc_messages(outputs), receive
    names = list(outputs[0])

    def receive(raw: bytes) -> dict:
        return event_outputs(json.loads(raw), names)

    return http_events(outputs), receive


def one_round(service: ChatService, body: str, transport: str, tokens: int) -> dict[str, float]:
    """µs per token of each stage for one streamed request of `tokens` tokens."""
    prepared = service.prepare(body, "bench")
    decoder, builder = prepared.decoders[0], prepared.builder
    sink = make_sink()
    wire, receive = make_receive(transport, backend_outputs(tokens))
    spent = dict.fromkeys(STAGES, 0)
    clock = time.thread_time_ns
    for raw in wire:
        t0 = clock()
        outputs = receive(raw)
        t1 = clock()
        output = decoder.decode(outputs)
        t2 = clock()
        payloads = builder.stream_output(0, output)
        t3 = clock()
        for payload in payloads:
            sink.send(payload, final=False)
        t4 = clock()
        spent["receive"] += t1 - t0
        spent["parse"] += t2 - t1
        spent["build"] += t3 - t2
        spent["send"] += t4 - t3
    for payload in builder.stream_finish(0):
        sink.send(payload, final=False)
    return {stage: ns / tokens / 1000 for stage, ns in spent.items()}


def make_service(tokenizer: Path, parsers: bool) -> ChatService:
    parameters = {"tokenizer": str(tokenizer), "served_model_name": "bench", "max_model_len": "4096"}
    if parsers:
        parameters.update(tool_call_parser="hermes", reasoning_parser="qwen3")
    return ChatService(Settings.from_parameters(parameters, None))


def run(tokens: int, rounds: int, transport: str, parsers: bool, tokenizer: Path) -> dict:
    service = make_service(tokenizer, parsers)
    request = {"model": "bench", "messages": [{"role": "user", "content": "Tell me about rivers."}],
               "stream": True, "max_tokens": tokens}
    if parsers:
        request["tools"] = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = json.dumps(request)
    one_round(service, body, transport, min(tokens, 200))  # warm-up
    results = [one_round(service, body, transport, tokens) for _ in range(rounds)]
    summary = {}
    for stage in (*STAGES, "total"):
        values = [sum(r.values()) if stage == "total" else r[stage] for r in results]
        summary[stage] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=2000, help="tokens per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--transport", choices=("grpc", "http"), default="grpc")
    p.add_argument("--parsers", action="store_true", help="with the hermes and qwen3 parsers (and tools)")
    p.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    summary = run(args.tokens, args.rounds, args.transport, args.parsers, args.tokenizer)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"per-token CPU of the chat layer, µs (median of {args.rounds} rounds of {args.tokens} tokens; range), "
          f"transport {args.transport}{', parsers hermes + qwen3' if args.parsers else ''}")
    for stage, value in summary.items():
        print(f"  {stage:8s} {value['median']:7.1f}   ({value['min']:.1f}-{value['max']:.1f})")
    return 0
