"""NVIDIA's AIPerf measuring `openai_chat` unchanged, two ways, and checking its token counts.

    make bench-aiperf                       # or: .venv/bin/python tools/bench_aiperf.py [options]

1. Through Triton's own `generate_stream` with AIPerf's `template` endpoint: the body is
   `{"request": "<the chat request as a JSON string>"}` (the template: tools/aiperf_generate.jinja),
   and AIPerf reads the plain `text_output` output (`openai_chat` with `text_output: true`).
2. Through the OpenAI-compatible gateway with AIPerf's `chat` endpoint.

Starts its own tritonserver (the tiny model on the CPU vLLM engine, `text_output: true`) and the
gateway, unless `--url` names a running server whose `openai_chat` has `text_output` on. AIPerf
runs from its own environment (build/aiperf-venv, requirements-aiperf.txt): its dependencies
would otherwise replace packages vLLM needs here. Each AIPerf run's output tokens (counted by
AIPerf with the model's tokenizer from the text it received) are compared with what the server
counted for the same requests (the `tritonchat_completion_tokens_total` metric); the summary
is printed and written to <artifacts>/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from harness.aiperf import aiperf  # noqa: E402
from harness.serve import TINY_MODEL, cpu_engine_args  # noqa: E402
from harness.server import TritonServer, free_port  # noqa: E402
from tritonchat.repository import prepare_repository  # noqa: E402

TEMPLATE = ROOT / "tools" / "aiperf_generate.jinja"
SERVED = "tiny-chat"


def log(message: str) -> None:
    print(f"[bench-aiperf] {message}", file=sys.stderr, flush=True)


def completion_tokens(metrics_url: str, model: str) -> float:
    """The server's `tritonchat_completion_tokens_total` for `model`."""
    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    pattern = rf'^tritonchat_completion_tokens_total\{{[^}}]*model="{re.escape(model)}"[^}}]*\}} (\S+)$'
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def run_aiperf(binary: Path, name: str, artifacts: Path, tokenizer: Path, args, endpoint: list[str]) -> dict:
    out = artifacts / name
    command = [
        str(binary), "profile", *endpoint, "--streaming", "--tokenizer", str(tokenizer),
        *(["--input-file", str(args.input_file), "--custom-dataset-type", "single_turn"] if args.input_file else
          ["--synthetic-input-tokens-mean", str(args.input_tokens), "--synthetic-input-tokens-stddev", "0"]),
        "--output-tokens-mean", str(args.output_tokens), "--output-tokens-stddev", "0",
        "--request-count", str(args.requests), "--concurrency", str(args.concurrency),
        "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry", "--artifact-dir", str(out),
    ]
    # A local tokenizer directory fails under the Hugging Face offline switches (AIPerf then
    # treats it as a hub id); it needs no network without them.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    log(f"{name}: {' '.join(command)}")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
    (artifacts / f"{name}.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise RuntimeError(f"AIPerf failed ({name}), see {artifacts / f'{name}.log'}:\n{result.stderr[-2000:]}")
    return json.loads((out / "profile_export_aiperf.json").read_text())


def metric(export: dict, name: str, stat: str = "avg"):
    value = export.get(name)
    return value.get(stat) if isinstance(value, dict) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--input-tokens", type=int, default=32)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--input-file", type=Path, help="prompts (AIPerf single_turn JSONL) instead of synthetic ones")
    parser.add_argument("--url", help="host:port of a running server's HTTP endpoint (default: start one)")
    parser.add_argument("--metrics-url", help="its metrics endpoint (default: the HTTP host, port 8002)")
    parser.add_argument("--gateway", help="a running gateway's base URL (default: start one)")
    parser.add_argument("--model", default=str(TINY_MODEL), help="Hugging Face model directory (and tokenizer)")
    parser.add_argument("--triton-model", default="openai_chat", help="the chat model (with text_output on)")
    parser.add_argument("--served-model-name", default=SERVED, help="`model` in the requests")
    parser.add_argument("--template", type=Path, default=TEMPLATE, help="AIPerf payload template for generate_stream")
    parser.add_argument("--artifacts", type=Path, help="where AIPerf writes (default: a new directory in build/)")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)
    artifacts = args.artifacts or Path(tempfile.mkdtemp(prefix="aiperf-", dir=ROOT / "build"))
    artifacts.mkdir(parents=True, exist_ok=True)
    model = Path(args.model).resolve()
    binary = aiperf()

    server = gateway = None
    try:
        if args.url:
            http_url = args.url
            metrics_url = args.metrics_url or f"{args.url.rsplit(':', 1)[0]}:8002"
        else:
            http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
            repo = prepare_repository(
                ROOT / "model_repository", artifacts / "model_repository", model=str(model), served_model_name=args.served_model_name,
                engine_args=cpu_engine_args(model, {}), only=["openai_chat", "vllm_model"],
                chat_parameters={"http_url": f"localhost:{http_port}", "grpc_url": f"localhost:{grpc_port}",
                                 "text_output": "true"})
            server = TritonServer(repo, http_port, grpc_port, metrics_port, log_path=artifacts / "tritonserver.log")
            log(f"starting tritonserver (log: {server.log_path})")
            server.start()
            server.wait_ready(timeout=600)
            http_url, metrics_url = f"localhost:{http_port}", f"localhost:{metrics_port}"
        gateway_url = args.gateway
        if not gateway_url:
            port = free_port()
            gateway = subprocess.Popen(
                [sys.executable, "-m", "tritonchat.clients.gateway", "--port", str(port), "--http-url", http_url,
                 "--chat-model", args.triton_model],
                stdout=open(artifacts / "gateway.log", "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
            gateway_url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(gateway_url + "/health", timeout=2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the gateway did not start") from None
                    time.sleep(0.2)

        runs = {
            "generate_stream (template endpoint)": [
                "--model", args.served_model_name, "--url", f"http://{http_url}", "--endpoint-type", "template",
                "--custom-endpoint", f"/v2/models/{args.triton_model}/generate_stream",
                "--extra-inputs", f"payload_template:{args.template}", "response_field:text_output"],
            "gateway (chat endpoint)": [
                "--model", args.served_model_name, "--url", gateway_url, "--endpoint-type", "chat",
                "--extra-inputs", "ignore_eos:true"],
        }
        summary = {}
        for name, endpoint in runs.items():
            before = completion_tokens(metrics_url, args.triton_model)
            export = run_aiperf(binary, re.sub(r"\W+", "_", name).strip("_"), artifacts, model, args, endpoint)
            served = completion_tokens(metrics_url, args.triton_model) - before
            counted = metric(export, "output_token_count", "sum")
            summary[name] = {
                "requests": metric(export, "request_count"),
                "output_tokens_aiperf": counted,
                "output_tokens_server": served,
                "output_token_throughput_per_s": metric(export, "output_token_throughput"),
                "ttft_p50_ms": metric(export, "time_to_first_token", "p50"),
                "itl_p50_ms": metric(export, "inter_token_latency", "p50"),
                "request_latency_p50_ms": metric(export, "request_latency", "p50"),
            }
        (artifacts / "summary.json").write_text(json.dumps(summary, indent=1))
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(timeout=10)
        if server is not None:
            server.stop(timeout=60)

    print(f"AIPerf {args.requests} requests at concurrency {args.concurrency}, {args.input_tokens} input and "
          f"{args.output_tokens} output tokens each (artifacts: {artifacts})\n")
    print("| path | output tokens (AIPerf / server) | output tokens/s | TTFT p50 ms | ITL p50 ms | latency p50 ms |")
    print("|---|---|---|---|---|---|")

    def fmt(value) -> str:
        return "-" if value is None else f"{value:,.1f}" if isinstance(value, float) else str(value)

    for name, s in summary.items():
        print(f"| {name} | {fmt(s['output_tokens_aiperf'])} / {fmt(s['output_tokens_server'])} | "
              f"{fmt(s['output_token_throughput_per_s'])} | {fmt(s['ttft_p50_ms'])} | {fmt(s['itl_p50_ms'])} | "
              f"{fmt(s['request_latency_p50_ms'])} |")
    print(f"\nsummary: {artifacts / 'summary.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
