"""Integration fixtures: one real `tritonserver` for the whole test session, in explicit model
control: it starts with no model loaded, and a test gets the models it uses loaded (with the
models they call) before it runs: the models its client fixtures name (`scripted`, `tiny`, ...)
and those its module or function lists with `@pytest.mark.models(...)`. Running one module
loads only what that module uses.

Its repository holds:
- `openai_chat` exactly as committed, calling `vllm_model`: the tiny chat model on the
  local vLLM backend (real vLLM engine on the CPU);
- `chat_scripted`: the same `openai_chat` code calling `scripted_vllm`, a model with the
  vLLM backend's interface whose output each test scripts through the prompt;
- `..._grpc` and `..._bls` of both: the same over the gRPC and BLS transports (HTTP is the
  default);
- `openai_completions` and `completions_scripted`: the Completions model in front of each
  (and `completions_trtllm`, `completions_tensorrt_llm` in front of the TensorRT-LLM stand-ins);
- `chat_tools` (and `chat_tools_trtllm`, `chat_tools_tensorrt_llm`): `openai_chat` with the
  hermes tool-call and qwen3 reasoning parsers, in front of each scripted model;
- `anthropic_scripted` (with those parsers, in front of `scripted_vllm`) and `anthropic_messages`
  (in front of `vllm_model`): the Anthropic Messages model;
- `responses_scripted` (with those parsers, in front of `scripted_vllm`) and `openai_responses`
  (in front of `vllm_model`): the OpenAI Responses model;
- `openai_chat_inprocess` and `completions_inprocess`: the chat and Completions models with
  their own vLLM engine (`engine: inprocess`) on vllm_model's engine arguments and LoRA
  adapter; `chat_inprocess_spare`: another, for the tests that stop or kill its engine;
- `openai_embeddings` (`_grpc`, `_bls`): the embeddings model in front of `vllm_embed`, the tiny
  model's weights as an embedding model on vLLM; `embeddings_not_matryoshka` (the tiny chat
  model's config: no Matryoshka sizes), `embeddings_of_chat` (in front of `vllm_model`, whose
  engine does not embed) and `embeddings_trtllm` (a TensorRT-LLM format: refused at load);
- `ensemble`, `tensorrt_llm` and `llmapi`: stand-ins with the interfaces of NVIDIA's
  TensorRT-LLM models (`llmapi_not_decoupled`: the LLM API model as NVIDIA's model.yaml
  configures it), and `chat_trtllm` / `chat_tensorrt_llm` / `chat_llmapi`: `openai_chat` in
  front of each with the `trtllm`, `tensorrt_llm` and `llmapi` request formats (and over the other transports;
  `chat_trtllm_counting` counts tokens itself instead of asking the ensemble).
The vLLM model serves one LoRA adapter, `tiny-lora` (random weights), named
`tiny-chat:tiny-lora` through `openai_chat`.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.helpers import ChatClient
from tests.vision import IMAGE_URL_PREFIX, vision_tokenizer
from harness.repositories import (
    add_chat_model,
    add_inprocess_chat_model,
    add_llmapi_model,
    add_test_model,
    add_vllm_model,
    old_release_config,
    tokenizer_with_template,
    tokenizer_with_turn_end,
    write_random_lora,
)
from tritonchat.repository import set_parameter
from harness.server import TritonServer, free_port, server_env, tcp_connections
from harness.tiny_embedding_model import EMBEDDING_ENGINE_ARGS

# Plain ChatML (string content, no tool or reasoning support) and Mistral's v1 template (no
# system role, roles must alternate), as their models ship them.
OTHER_TEMPLATES = {
    "chatml": (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
        "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
    ),
}


# A Harmony-format template in the shape of gpt-oss's (system message with the reasoning
# effort, tools as a `functions` namespace in a developer message, calls and tool results on
# the commentary channel, the prompt ending in `<|start|>assistant`).
HARMONY_TEMPLATE = (
    "<|start|>system<|message|>You are a helpful assistant.\nReasoning: {{ reasoning_effort | default('medium') }}"
    "\n\n# Valid channels: analysis, commentary, final.<|end|>"
    "{% if tools %}<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n"
    "{% for tool in tools %}// {{ tool.function.description }}\ntype {{ tool.function.name }} = "
    "(_: {{ tool.function.parameters | tojson }}) => any;\n{% endfor %}} // namespace functions<|end|>{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' or message.role == 'system' %}"
    "<|start|>{{ 'user' if message.role == 'user' else 'developer' }}<|message|>{{ message.content }}<|end|>"
    "{% elif message.role == 'assistant' %}"
    "{% if message.reasoning_content %}<|start|>assistant<|channel|>analysis<|message|>{{ message.reasoning_content }}<|end|>{% endif %}"
    "{% for call in message.tool_calls or [] %}<|start|>assistant to=functions.{{ call.function.name }}"
    "<|channel|>commentary json<|message|>{{ call.function.arguments | tojson }}<|call|>{% endfor %}"
    "{% if message.content %}<|start|>assistant<|channel|>final<|message|>{{ message.content }}<|end|>{% endif %}"
    "{% elif message.role == 'tool' %}<|start|>functions.{{ message.name | default('tool') }} to=assistant"
    "<|channel|>commentary<|message|>{{ message.content }}<|end|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)


@dataclass(frozen=True)
class Route:
    """One way `openai_chat` reaches a scripted generation model."""

    fmt: str  # request format
    transport: str
    model: str  # the openai_chat model
    target: str  # the generation model

    def __str__(self) -> str:
        return f"{self.fmt}-{self.transport}"


TRANSPORTS = {"http": "", "grpc": "_grpc", "bls": "_bls"}  # transport -> model name suffix
ROUTES = [
    Route("vllm", "http", "chat_scripted", "scripted_vllm"),
    Route("vllm", "grpc", "chat_scripted_grpc", "scripted_vllm"),
    Route("vllm", "bls", "chat_scripted_bls", "scripted_vllm"),
    Route("trtllm", "http", "chat_trtllm", "ensemble"),
    Route("trtllm", "grpc", "chat_trtllm_grpc", "ensemble"),
    Route("tensorrt_llm", "http", "chat_tensorrt_llm", "tensorrt_llm"),
    Route("tensorrt_llm", "grpc", "chat_tensorrt_llm_grpc", "tensorrt_llm"),
    Route("tensorrt_llm", "bls", "chat_tensorrt_llm_bls", "tensorrt_llm"),
    Route("llmapi", "http", "chat_llmapi", "llmapi"),
]


@pytest.fixture(scope="session")
def triton(tmp_path_factory, tiny_model, tiny_embedding_model) -> TritonServer:
    repo = tmp_path_factory.mktemp("model_repository")
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    # Every chat model reaches the server it runs in at these (each picks one by `transport`).
    loopback = dict(http_url=f"127.0.0.1:{http_port}", grpc_url=f"127.0.0.1:{grpc_port}")

    def chat_model(name: str, **parameters: str) -> None:
        add_chat_model(repo, name, **loopback, **parameters)

    add_test_model(repo, "scripted_vllm")
    scripted = dict(
        target_model="scripted_vllm",
        tokenizer=str(tiny_model),
        served_model_name="scripted",
        idle_timeout_s="3",
        cancel_check_interval_ms="50",
    )
    for name, source in (("ensemble", "trtllm_ensemble"), ("tensorrt_llm", "tensorrt_llm_mock")):
        config = add_test_model(repo, name, source) / "config.pbtxt"
        config.write_text(set_parameter(config.read_text(), "tokenizer_dir", str(tiny_model)))
    trt = {**scripted, "max_model_len": "2048"}
    add_llmapi_model(repo, "llmapi", tiny_model)
    add_llmapi_model(repo, "llmapi_not_decoupled", tiny_model, decoupled=False)
    chat_model("chat_llmapi_not_decoupled", request_format="llmapi",
               **{**trt, "target_model": "llmapi_not_decoupled"})
    for route in ROUTES:
        target = {"target_model": route.target, "request_format": route.fmt} if route.fmt != "vllm" else {}
        trust = {"trust_request_chat_template": "true"} if route.model == "chat_scripted" else {}
        chat_model(route.model, transport=route.transport, **trust, **{**(trt if route.fmt != "vllm" else scripted), **target})
    chat_model("chat_scripted_cancel", transport="grpc", grpc_cancel="true", **scripted)
    chat_model("chat_metrics", **scripted, first_token_stages="true")  # only test_metrics.py uses it: its counts are exact
    chat_model("chat_capped", max_open_requests="8", **scripted)
    chat_model("chat_text_output", text_output="true", **scripted)
    # Chat templates of other shapes than the tiny model's (see OTHER_TEMPLATES).
    for name, template in OTHER_TEMPLATES.items():
        tokenizer_dir = tokenizer_with_template(tiny_model, tmp_path_factory.mktemp(name) / "tokenizer", template)
        chat_model(f"chat_{name}", **{**scripted, "tokenizer": str(tokenizer_dir)})
    chat_model("completions_scripted", source="openai_completions", **scripted)
    # gpt-oss's output format, read with vLLM's two Harmony parsers.
    harmony = tokenizer_with_template(tiny_model, tmp_path_factory.mktemp("harmony") / "tokenizer", HARMONY_TEMPLATE)
    chat_model("chat_gptoss", tool_call_parser="openai", reasoning_parser="openai_gptoss",
               **{**scripted, "tokenizer": str(harmony)})
    tools = dict(tool_call_parser="hermes", reasoning_parser="qwen3")
    chat_model("chat_tools", **tools, **scripted)
    # Anthropic Messages (test_anthropic.py): in front of the scripted model, with the same parsers.
    chat_model("anthropic_scripted", source="anthropic_messages", **tools, **scripted)
    # OpenAI Responses (test_responses.py): the same, in front of the scripted model.
    chat_model("responses_scripted", source="openai_responses", **tools, **scripted)
    for fmt, target in (("trtllm", "ensemble"), ("tensorrt_llm", "tensorrt_llm"), ("llmapi", "llmapi")):
        chat_model(f"chat_tools_{fmt}", request_format=fmt, **tools, **{**trt, "target_model": target})
        chat_model(f"completions_{fmt}", source="openai_completions", request_format=fmt,
                   **{**trt, "target_model": target})
    # A tokenizer whose EOS is not the token that ends a chat turn (both in generation_config.json).
    eot = tokenizer_with_turn_end(tiny_model, tmp_path_factory.mktemp("eot") / "tokenizer", "<|endoftext|>", "<|im_end|>")
    config = add_test_model(repo, "ensemble_eot", "trtllm_ensemble") / "config.pbtxt"
    config.write_text(set_parameter(config.read_text(), "tokenizer_dir", str(eot)))
    for fmt, target in (("trtllm", "ensemble_eot"), ("tensorrt_llm", "tensorrt_llm")):
        chat_model(f"chat_{fmt}_eot", request_format=fmt, **{**trt, "target_model": target, "tokenizer": str(eot)})
    # An ensemble of an older release (other input names, fewer inputs): learnt from the server.
    config = add_test_model(repo, "ensemble_old", "trtllm_ensemble") / "config.pbtxt"
    config.write_text(old_release_config(set_parameter(config.read_text(), "tokenizer_dir", str(tiny_model))))
    chat_model("chat_trtllm_old", request_format="trtllm", **{**trt, "target_model": "ensemble_old"})
    # The vLLM backend of Triton 25.01-25.10 (no `embedding_request`, `guided_decoding` key).
    config = add_test_model(repo, "scripted_vllm_2510", "scripted_vllm") / "config.pbtxt"
    config.write_text(set_parameter(
        "\n".join(line for line in config.read_text().splitlines() if '"embedding_request"' not in line)
        .replace("optional: true },\n]", "optional: true }\n]"),
        "structured_outputs_key", "guided_decoding"))
    chat_model("chat_scripted_2510", **{**scripted, "target_model": "scripted_vllm_2510"})
    chat_model("chat_scripted_2510_key", structured_outputs_key="guided_decoding",
               **{**scripted, "target_model": "scripted_vllm_2510"})
    # An ensemble of a release without num_input_tokens / num_output_tokens: counted here.
    chat_model("chat_trtllm_counting", request_format="trtllm", trtllm_token_counts="false",
               **{**trt, "target_model": "ensemble"})
    # Images (test_images.py): a LLaVA-style vision model in front of the scripted model, with an
    # allow-list and small limits; with the defaults; and in front of a vLLM backend without `image`.
    vision = dict(scripted, tokenizer=str(vision_tokenizer(tiny_model, tmp_path_factory.mktemp("vision") / "tok")))
    chat_model("chat_vision", image_url_allowlist=IMAGE_URL_PREFIX, image_fetch_timeout_s="1",
               max_image_bytes="65536", max_images="3", **vision)
    chat_model("chat_vision_defaults", **vision)
    config = add_test_model(repo, "scripted_vllm_no_image", "scripted_vllm") / "config.pbtxt"
    config.write_text(config.read_text().replace('{ name: "image", data_type: TYPE_STRING, dims: [ -1 ], optional: true },\n', ""))
    chat_model("chat_vision_no_image", **{**vision, "target_model": "scripted_vllm_no_image"})
    lora = write_random_lora(tiny_model, tmp_path_factory.mktemp("lora") / "tiny-lora")
    chat_model("chat_llmapi_lora", request_format="llmapi", lora_separator=":", lora_paths=f"tiny-lora={lora}",
               **{**trt, "target_model": "llmapi"})
    add_vllm_model(
        repo,
        "vllm_model",
        tiny_model,
        lora_adapters={"tiny-lora": lora},
        # Keeps JSON from a random model compact (no whitespace loops) so it finishes.
        structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True},
    )
    add_vllm_model(repo, "vllm_plain", tiny_model)  # LoRA off (test_local_vllm_backend.py)
    # The chat models with their own engine, on vllm_model's engine arguments (test_inprocess.py,
    # and the `tiny` tests' "inprocess" parameter).
    same_engine = dict(lora_adapters={"tiny-lora": lora},
                       engine_args={"structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True}})
    add_inprocess_chat_model(repo, "openai_chat_inprocess", tiny_model, lora_separator=":", **same_engine)
    add_inprocess_chat_model(repo, "completions_inprocess", tiny_model, source="openai_completions",
                             lora_separator=":", **same_engine)
    add_inprocess_chat_model(repo, "chat_inprocess_spare", tiny_model, cancel_check_interval_ms="50")
    vllm_config = repo / "vllm_model" / "config.pbtxt"
    vllm_config.write_text(set_parameter(vllm_config.read_text(), "REPORT_CUSTOM_METRICS", "true"))
    for transport, suffix in TRANSPORTS.items():
        chat_model("openai_chat" + suffix, transport=transport, lora_separator=":", http_keepalive_s="2")
    chat_model("openai_completions", source="openai_completions", lora_separator=":")
    chat_model("anthropic_messages", source="anthropic_messages")  # in front of the tiny model on vLLM
    chat_model("openai_responses", source="openai_responses")  # in front of the tiny model on vLLM
    # OpenAI embeddings (test_embeddings.py), on the tiny model's weights as an embedding model.
    add_vllm_model(repo, "vllm_embed", tiny_embedding_model, served_model_name="tiny-embed", **EMBEDDING_ENGINE_ARGS)
    embeddings = dict(source="openai_embeddings", target_model="vllm_embed")
    for transport, suffix in TRANSPORTS.items():
        chat_model("openai_embeddings" + suffix, transport=transport, **embeddings)
    chat_model("embeddings_not_matryoshka", tokenizer=str(tiny_model), **embeddings)
    chat_model("embeddings_of_chat", source="openai_embeddings")
    chat_model("embeddings_trtllm", request_format="trtllm", tokenizer=str(tiny_embedding_model),
               **{**embeddings, "target_model": "ensemble"})
    # Whole answers asked of the vLLM backend as a stream (vllm_stream_whole), assembled here.
    chat_model("chat_whole_streamed", vllm_stream_whole="true")
    log = tmp_path_factory.getbasetemp() / "tritonserver.log"
    server = TritonServer(repo, http_port, grpc_port, metrics_port, log_path=log, explicit=True)
    loaded_engines: set[str] = set()
    try:
        with server:
            yield server
            loaded_engines = {name for name in server.loaded if name.startswith("vllm_")}
            stopped_cleanly(server, loaded_engines)
    finally:
        print(f"\ntritonserver log: {log}")


def stopped_cleanly(server: TritonServer, engines: set[str]) -> None:
    """At the end of the session: Ctrl-C stops the server with status 0 and without waiting out its
    exit timeout, every vLLM engine still loaded shuts down, and no process of it is left (stub,
    engine core, worker; a worker notices its engine core is gone and exits on its own)."""
    # Triton waits at exit until its HTTP connections close: first close the tests' own.
    ChatClient.close_all()
    gc.collect()
    deadline = time.monotonic() + 30
    while tcp_connections(os.getpid(), server.http_port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tcp_connections(os.getpid(), server.http_port) == 0, "the tests left connections to the server open"
    started = time.monotonic()
    code = server.stop_gracefully()
    log = server.log_path.read_text(errors="replace")
    assert code == 0, log[-3000:]
    assert "Exit timeout expired" not in log
    for engine in engines:
        assert f"successfully unloaded '{engine}'" in log
    deadline = time.monotonic() + 30
    while (leftovers := server.group_members()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftovers, leftovers
    print(f"\ntritonserver stopped in {time.monotonic() - started:.1f} s")


# vLLM's own servers, the references of the differential tests: each is started in the background
# at the start of a session that will use it (its start, mostly waiting, overlaps the tests before
# its first use), and waited for at first use.
_VLLM_SERVERS = {"vllm_server": ("tiny-chat", None), "vllm_embedding_server": ("tiny-embed", EMBEDDING_ENGINE_ARGS)}


class VllmOpenAIServer:
    """vLLM's OpenAI-compatible server on a model's files, in its own process group."""

    def __init__(self, model: Path, served_name: str, log_path: Path, engine_args: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        extra = [arg for key, value in (engine_args or {}).items() for arg in (f"--{key}", str(value))]
        command = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model), "--served-model-name", served_name,
            "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048",
            "--gpu-memory-utilization", "0.1", "--host", "127.0.0.1", "--port", str(self.port), *extra,
        ]
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=server_env(),
                                            start_new_session=True)

    def wait_ready(self, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM's server exited:\n{self.log_path.read_text()[-3000:]}")
            try:
                if requests.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self.url
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"vLLM's server did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(1)

    def kill(self) -> None:
        # Only a reference to compare with: its own graceful shutdown takes about 10 s and is
        # not under test, so its whole process group (API server, engine core) is killed.
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
        self.process.wait(30)


@pytest.fixture(scope="session")
def vllm_servers(request, tiny_model, tiny_embedding_model, tmp_path_factory):
    """The vLLM servers this session's tests use, started now, all at once (name -> server)."""
    wanted = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    models = {"vllm_server": tiny_model, "vllm_embedding_server": tiny_embedding_model}
    servers = {}
    try:
        for name, (served, engine_args) in _VLLM_SERVERS.items():
            if name in wanted:
                servers[name] = VllmOpenAIServer(models[name], served, tmp_path_factory.mktemp(served) / "server.log",
                                                 engine_args)
        yield servers
    finally:
        for server in servers.values():
            server.kill()


@pytest.fixture(scope="session", autouse=True)
def _start_vllm_servers(request) -> None:
    """Starts vLLM's own servers early when some test of the session will use one."""
    wanted = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    if wanted & set(_VLLM_SERVERS):
        request.getfixturevalue("vllm_servers")


@pytest.fixture(scope="session")
def vllm_server(vllm_servers) -> str:
    """vLLM's own OpenAI-compatible server on the tiny model files: the reference of the
    differential tests (test_vllm_differential.py, test_anthropic.py, ...); its URL."""
    return vllm_servers["vllm_server"].wait_ready()


@pytest.fixture(scope="session")
def vllm_embedding_server(vllm_servers) -> str:
    """vLLM's own server on the tiny embedding model's files, as `vllm_embed` runs them: the
    reference of test_embeddings.py; its URL."""
    return vllm_servers["vllm_embedding_server"].wait_ready()


@pytest.fixture(autouse=True)
def _models_loaded(request) -> None:
    """Loads the models the test's `models` markers name (module, class and function)."""
    names = [name for marker in request.node.iter_markers("models") for name in marker.args]
    if names:
        request.getfixturevalue("triton").load(*names)


def client(triton: TritonServer, model: str) -> ChatClient:
    """A client of `model`, loaded first."""
    triton.load(model)
    return ChatClient(triton.http_url, model)


@pytest.fixture(params=list(TRANSPORTS))
def transport(request) -> str:
    return request.param


@pytest.fixture(params=ROUTES, ids=str)
def route(request) -> Route:
    return request.param


@pytest.fixture
def scripted(triton, route) -> ChatClient:
    """`openai_chat` in front of a scripted model, over every request format and transport
    (`scripted.route` says which)."""
    chat = client(triton, route.model)
    chat.route = route
    return chat


@pytest.fixture
def vllm_scripted(triton, transport) -> ChatClient:
    """`openai_chat` in front of the scripted vLLM-interface model, over each transport."""
    return client(triton, "chat_scripted" + TRANSPORTS[transport])


class Expect:
    """Usage a route reports for scripted output: the vLLM-interface model reports what its
    script says; the TensorRT-LLM routes count real tokens."""

    def __init__(self, route: Route, tokenizer):
        self.route, self.tokenizer = route, tokenizer

    def completion_tokens(self, chunks: list[str]) -> int:
        if self.route.fmt == "vllm":
            return len(chunks)
        return sum(len(self.tokenizer.encode(c, add_special_tokens=False)) for c in chunks)

    def prompt_tokens(self, messages: list[dict], scripted_count: int) -> int:
        if self.route.fmt == "vllm":
            return scripted_count
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def streamed_text(self, chunks: list[str]) -> str:
        """What a stream shows: NVIDIA's ensemble decodes each token on its own."""
        if self.route.fmt != "trtllm":
            return "".join(chunks)
        ids = [i for c in chunks for i in self.tokenizer.encode(c, add_special_tokens=False)]
        return "".join(self.tokenizer.decode([i]) for i in ids)


@pytest.fixture
def expect(route, tokenizer) -> Expect:
    return Expect(route, tokenizer)


# The chat models on the tiny model in vLLM: over each transport, and with its own engine.
TINY_MODELS = {**{transport: "openai_chat" + suffix for transport, suffix in TRANSPORTS.items()},
               "inprocess": "openai_chat_inprocess"}


@pytest.fixture(params=list(TINY_MODELS))
def tiny(triton, request) -> ChatClient:
    """`openai_chat` in front of the tiny model on vLLM, over each transport, and `openai_chat` with
    its own vLLM engine on the same engine arguments (`engine: inprocess`)."""
    return client(triton, TINY_MODELS[request.param])


@pytest.fixture(params=["openai_completions", "completions_inprocess"])
def completions(triton, request) -> ChatClient:
    """`openai_completions` in front of the tiny model on vLLM, and with its own engine."""
    return client(triton, request.param)


COMPLETION_MODELS = {"vllm": "completions_scripted", "trtllm": "completions_trtllm",
                     "tensorrt_llm": "completions_tensorrt_llm", "llmapi": "completions_llmapi"}


@pytest.fixture(params=list(COMPLETION_MODELS))
def completions_scripted(triton, request) -> ChatClient:
    """`openai_completions` in front of each scripted model (`.fmt` says which format)."""
    chat = client(triton, COMPLETION_MODELS[request.param])
    chat.fmt = request.param
    return chat


TOOL_MODELS = {"vllm": "chat_tools", "trtllm": "chat_tools_trtllm", "tensorrt_llm": "chat_tools_tensorrt_llm",
               "llmapi": "chat_tools_llmapi"}


@pytest.fixture(params=list(TOOL_MODELS))
def chat_tools(triton, request) -> ChatClient:
    """`openai_chat` with the hermes and qwen3 parsers, over every request format."""
    chat = client(triton, TOOL_MODELS[request.param])
    chat.fmt = request.param
    return chat


@pytest.fixture
def server_log(triton) -> Path:
    return triton.log_path
