"""Shared test helpers: build a test model repository and talk to `openai_chat` over HTTP and gRPC."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tritonchat.repository import set_parameter

ROOT = Path(__file__).resolve().parent.parent
TEST_MODELS = Path(__file__).resolve().parent / "models"

# vLLM engine settings for the tiny model on this machine's CPU.
TINY_ENGINE_ARGS = {
    "dtype": "float32",
    "enforce_eager": True,
    "gpu_memory_utilization": 0.1,
    "max_model_len": 2048,
    "served_model_name": "tiny-chat",
}


def add_chat_model(repo: Path, name: str, source: str = "openai_chat", **parameters: str) -> Path:
    """Copy `openai_chat` (or `source`) into `repo` under `name` with the given config parameters."""
    dst = repo / name
    shutil.copytree(ROOT / "model_repository" / source, dst, ignore=shutil.ignore_patterns("__pycache__"))
    config = (dst / "config.pbtxt").read_text()
    for key, value in parameters.items():
        config = set_parameter(config, key, value)
    (dst / "config.pbtxt").write_text(config)
    return dst


def add_test_model(repo: Path, name: str, source: str | None = None) -> Path:
    """A model from tests/models (`source`, default `name`) under `name`."""
    dst = repo / name
    shutil.copytree(TEST_MODELS / (source or name), dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def add_vllm_model(repo: Path, name: str, model_dir: Path, lora_adapters: dict | None = None, **engine_args) -> Path:
    """The committed vllm_model config with a model.json for `model_dir` (and LoRA adapters)."""
    dst = repo / name
    (dst / "1").mkdir(parents=True)
    shutil.copy(ROOT / "model_repository" / "vllm_model" / "config.pbtxt", dst / "config.pbtxt")
    args = {"model": str(model_dir), **TINY_ENGINE_ARGS, **engine_args}
    if lora_adapters:
        args.update(enable_lora=True, max_lora_rank=8)
        (dst / "1" / "multi_lora.json").write_text(json.dumps({k: str(v) for k, v in lora_adapters.items()}))
    (dst / "1" / "model.json").write_text(json.dumps(args, indent=2))
    return dst


def script(**spec) -> str:
    """A user message that makes the scripted backend produce exactly `spec`."""
    return "SCRIPT:" + json.dumps(spec)


@dataclass
class StreamResult:
    status: int
    chunks: list[dict] = field(default_factory=list)
    error: dict | None = None  # the OpenAI error object, when the stream ended with one
    raw_events: list[dict] = field(default_factory=list)

    @property
    def content(self) -> str:
        return "".join(
            (choice["delta"].get("content") or "") for chunk in self.chunks for choice in chunk["choices"]
        )


class ChatClient:
    """`openai_chat` through Triton's HTTP generate extension."""

    def __init__(self, http_url: str, model: str = "openai_chat"):
        self.base = f"http://{http_url}/v2/models"
        self.model = model
        self.session = requests.Session()

    def _body(self, request: dict | str, request_id: str | None) -> dict:
        body = {"request": request if isinstance(request, str) else json.dumps(request)}
        if request_id is not None:
            body["id"] = request_id
        return body

    def create(self, request: dict | str, *, request_id: str | None = None, model: str | None = None):
        """Non-streaming: returns (status, completion dict or OpenAI error dict)."""
        r = self.session.post(f"{self.base}/{model or self.model}/generate", json=self._body(request, request_id), timeout=120)
        data = r.json()
        if "error" in data:
            return r.status_code, parse_error(data["error"])
        return r.status_code, json.loads(data["response"])

    def stream(self, request: dict | str, *, request_id: str | None = None, model: str | None = None) -> StreamResult:
        with self.session.post(
            f"{self.base}/{model or self.model}/generate_stream",
            json=self._body(request, request_id),
            stream=True,
            timeout=120,
        ) as r:
            result = StreamResult(status=r.status_code)
            if r.headers.get("content-type", "").startswith("application/json"):
                result.error = parse_error(r.json()["error"])
                return result
            for event in iter_sse(r):
                result.raw_events.append(event)
                if "error" in event:
                    result.error = parse_error(event["error"])
                else:
                    result.chunks.append(json.loads(event["response"]))
            return result


def iter_sse(response):
    for line in response.iter_lines(decode_unicode=False):
        if line.startswith(b"data: "):
            yield json.loads(line[len(b"data: ") :])


def parse_error(message: str) -> dict:
    """The OpenAI error object inside a Triton error message (or the raw message when it is not one)."""
    try:
        value = json.loads(message)
    except (TypeError, json.JSONDecodeError):
        return {"error": {"message": message, "type": None, "param": None, "code": None}, "raw": True}
    return value


class GrpcChatClient:
    """`openai_chat` through Triton's gRPC streaming API (tritonclient)."""

    def __init__(self, grpc_url: str, model: str = "openai_chat"):
        self.url = grpc_url
        self.model = model

    def stream(self, request: dict, *, request_id: str = "", grpc_error_status: bool = False, timeout: float = 60):
        """Returns (payload dicts, error) for one request; error is an InferenceServerException."""
        import queue

        import numpy as np
        import tritonclient.grpc as grpcclient

        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(self.url)
        headers = {"triton_grpc_error": "true"} if grpc_error_status else None
        client.start_stream(callback=lambda result, error: results.put((result, error)), headers=headers)
        try:
            tensor = grpcclient.InferInput("request", [1], "BYTES")
            tensor.set_data_from_numpy(np.array([json.dumps(request).encode()], dtype=np.object_))
            client.async_stream_infer(self.model, [tensor], request_id=request_id, enable_empty_final_response=True)
            payloads = []
            while True:
                result, error = results.get(timeout=timeout)
                if error is not None:
                    return payloads, error
                response = result.get_response()
                if response.outputs:
                    payloads.append(json.loads(result.as_numpy("response")[0]))
                if response.parameters["triton_final_response"].bool_param:
                    return payloads, None
        finally:
            client.stop_stream()
            client.close()


def write_random_lora(base: Path, out: Path, rank: int = 8) -> Path:
    """A PEFT-format LoRA adapter (q_proj, v_proj) with random weights for the tiny Llama."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((base / "config.json").read_text())
    hidden = config["hidden_size"]
    kv_width = config["num_key_value_heads"] * (hidden // config["num_attention_heads"])
    generator = torch.Generator().manual_seed(1)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module, width in (("q_proj", hidden), ("v_proj", kv_width)):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=generator) * 0.5
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(width, rank, generator=generator) * 0.5
    out.mkdir(parents=True)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"],
        "bias": "none",
        "fan_in_fan_out": False,
        "base_model_name_or_path": str(base),
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config))
    return out
