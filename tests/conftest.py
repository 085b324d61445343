"""Integration fixtures: one real `tritonserver` for the whole test session.

Its repository holds:
- `openai_chat` exactly as committed, calling `vllm_model`: the tiny chat model on the
  local vLLM backend (real vLLM engine on the CPU);
- `chat_scripted`: the same `openai_chat` code calling `scripted_vllm`, a model with the
  vLLM backend's interface whose output each test scripts through the prompt;
- `openai_chat_bls` and `chat_scripted_bls`: the same two over the BLS transport;
- `openai_completions` and `completions_scripted`: the Completions model in front of each;
- `chat_tools`: `openai_chat` with the hermes tool-call and qwen3 reasoning parsers, in
  front of the scripted model.
The vLLM model serves one LoRA adapter, `tiny-lora` (random weights), named
`tiny-chat:tiny-lora` through `openai_chat`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ROOT, ChatClient, add_chat_model, add_test_model, add_vllm_model, write_random_lora
from tools.tritonlocal import TritonServer, free_port

TINY_MODEL = ROOT / "build" / "tiny-chat"


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_tiny_model.py"), "--out", str(TINY_MODEL)], check=True)
    return TINY_MODEL


@pytest.fixture(scope="session")
def triton(tmp_path_factory, tiny_model) -> TritonServer:
    repo = tmp_path_factory.mktemp("model_repository")
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    grpc_url = f"127.0.0.1:{grpc_port}"
    add_test_model(repo, "scripted_vllm")
    scripted = dict(
        target_model="scripted_vllm",
        tokenizer=str(tiny_model),
        served_model_name="scripted",
        idle_timeout_s="3",
        cancel_check_interval_ms="50",
    )
    add_chat_model(repo, "chat_scripted", grpc_url=grpc_url, trust_request_chat_template="true", **scripted)
    add_chat_model(repo, "chat_scripted_bls", transport="bls", **scripted)
    add_chat_model(repo, "completions_scripted", source="openai_completions", grpc_url=grpc_url, **scripted)
    add_chat_model(repo, "chat_tools", grpc_url=grpc_url, tool_call_parser="hermes", reasoning_parser="qwen3", **scripted)
    lora = write_random_lora(tiny_model, tmp_path_factory.mktemp("lora") / "tiny-lora")
    add_vllm_model(
        repo,
        "vllm_model",
        tiny_model,
        lora_adapters={"tiny-lora": lora},
        # Keeps JSON from a random model compact (no whitespace loops) so it finishes.
        structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True},
    )
    add_chat_model(repo, "openai_chat", grpc_url=grpc_url, lora_separator=":")
    add_chat_model(repo, "openai_chat_bls", transport="bls", lora_separator=":")
    add_chat_model(repo, "openai_completions", source="openai_completions", grpc_url=grpc_url, lora_separator=":")
    log = tmp_path_factory.getbasetemp() / "tritonserver.log"
    server = TritonServer(repo, http_port, grpc_port, metrics_port, log_path=log)
    server.start()
    try:
        server.wait_ready(timeout=300)
        yield server
    finally:
        server.stop()
        print(f"\ntritonserver log: {log}")


TRANSPORTS = {"grpc": "", "bls": "_bls"}


@pytest.fixture(params=list(TRANSPORTS))
def transport(request) -> str:
    return request.param


@pytest.fixture
def scripted(triton, transport) -> ChatClient:
    """`openai_chat` in front of the scripted model, over each transport."""
    return ChatClient(triton.http_url, "chat_scripted" + TRANSPORTS[transport])


@pytest.fixture
def tiny(triton, transport) -> ChatClient:
    """`openai_chat` in front of the tiny model on vLLM, over each transport."""
    return ChatClient(triton.http_url, "openai_chat" + TRANSPORTS[transport])


@pytest.fixture
def completions(triton) -> ChatClient:
    return ChatClient(triton.http_url, "openai_completions")


@pytest.fixture
def completions_scripted(triton) -> ChatClient:
    return ChatClient(triton.http_url, "completions_scripted")


@pytest.fixture
def chat_tools(triton) -> ChatClient:
    return ChatClient(triton.http_url, "chat_tools")


@pytest.fixture
def server_log(triton) -> Path:
    return triton.log_path
