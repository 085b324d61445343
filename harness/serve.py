"""Serve the model repository on a local Triton server (ports 8000/8001/8002 by default).

Without --model it serves the embedded tiny chat model made at setup. With --model it
serves the Hugging Face model in that directory on the CPU build of vLLM. With
--embedding-model (e.g. build/tiny-embed) `openai_embeddings` serves that model, on a second
vLLM model (`vllm_embedding_model`); without it `openai_embeddings` is left out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.server import BUILD, ROOT, TritonServer  # noqa: E402
from harness.tiny_embedding_model import EMBEDDING_ENGINE_ARGS  # noqa: E402
from tritonchat.repository import config_context_length, parse_engine_arg, prepare_repository, set_parameter  # noqa: E402
from tritonchat.settings import ConfigError, check_parameters  # noqa: E402

TINY_MODEL = BUILD / "tiny-chat"
TINY_EMBED = BUILD / "tiny-embed"
EMBEDDINGS = "openai_embeddings"
EMBEDDING_TARGET = "vllm_embedding_model"
# Engine settings that work for vLLM's CPU build (see docs/deployment.md, "Serving a real model locally").
CPU_ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.1}
# The context the CPU engine reserves memory for, unless the model's own is shorter (vLLM
# refuses a `max_model_len` above the model's).
CPU_MAX_MODEL_LEN = 2048


def cpu_engine_args(model: Path, overrides: dict) -> dict:
    """CPU_ENGINE_ARGS, `max_model_len` capped at the model's own context (left to vLLM when
    config.json does not say), then `overrides`."""
    args = dict(CPU_ENGINE_ARGS)
    own = config_context_length(model)
    if own:
        args["max_model_len"] = min(CPU_MAX_MODEL_LEN, own)
    return {**args, **overrides}


def chat_parameter(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=str(TINY_MODEL), help="Hugging Face model directory")
    parser.add_argument("--served-model-name", help="name clients send as 'model' (default: tiny-chat or the directory name)")
    parser.add_argument("--engine-arg", action="append", default=[], type=parse_engine_arg, help="vLLM engine argument key=value")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--chat-parameter", action="append", default=[], type=chat_parameter, metavar="KEY=VALUE",
                        help="a parameter of openai_chat, openai_completions, anthropic_messages and openai_responses "
                             "(docs/configuration.md), e.g. tool_call_parser=hermes; repeatable")
    parser.add_argument("--embedding-model", help="Hugging Face embedding model directory for openai_embeddings "
                                                   "(default: none, and openai_embeddings is not served)")
    parser.add_argument("--inprocess", action="store_true",
                        help="openai_chat runs its own vLLM engine (engine: inprocess) on vllm_model's engine "
                             "arguments; the other protocol models keep calling vllm_model")
    parser.add_argument("--repository", type=Path, default=BUILD / "serve_repository",
                        help="where the runnable model repository is written")
    return parser


def prepare(args: argparse.Namespace) -> tuple[Path, str, Path]:
    """Writes the repository `args` describe: (repository, served model name, model directory).
    Exits with a message naming what is wrong (not a model directory, a bad chat parameter)."""
    model = Path(args.model).resolve()
    if not (model / "config.json").is_file():
        sys.exit(f"{model} is not a Hugging Face model directory (no config.json)")
    chat = dict(args.chat_parameter)
    try:
        check_parameters(chat)
    except ConfigError as error:
        sys.exit(f"--chat-parameter: {error}")
    served = args.served_model_name or ("tiny-chat" if model == TINY_MODEL.resolve() else model.name)
    loopback = {"http_url": f"localhost:{args.http_port}", "grpc_url": f"localhost:{args.grpc_port}"}
    embedding_model = Path(args.embedding_model).resolve() if args.embedding_model else None
    if embedding_model is not None and not (embedding_model / "config.json").is_file():
        sys.exit(f"{embedding_model} is not a Hugging Face model directory (no config.json)")
    models = [p.name for p in (ROOT / "model_repository").iterdir() if p.is_dir()]
    repo = prepare_repository(
        ROOT / "model_repository",
        args.repository,
        model=str(model),
        served_model_name=served,
        engine_args=cpu_engine_args(model, dict(args.engine_arg)),
        chat_parameters={**loopback, **chat},
        only=[name for name in models if embedding_model is not None or name != EMBEDDINGS],
    )
    if embedding_model is not None:
        add_embedding_model(repo, embedding_model, loopback)
    if args.inprocess:
        give_own_engine(repo, "openai_chat")
    return repo, served, model


def give_own_engine(repo: Path, name: str) -> None:
    """`name` with its own vLLM engine: vllm_model's engine arguments (model.json, and
    multi_lora.json) in its version directory, and `engine: inprocess` (docs/design.md)."""
    for file in ("model.json", "multi_lora.json"):
        source = repo / "vllm_model" / "1" / file
        if source.is_file():
            shutil.copyfile(source, repo / name / "1" / file)
    config_path = repo / name / "config.pbtxt"
    config_path.write_text(set_parameter(config_path.read_text(), "engine", "inprocess"))


def embedding_name(model: Path) -> str:
    return "tiny-embed" if model == TINY_EMBED.resolve() else model.name


def add_embedding_model(repo: Path, model: Path, loopback: dict[str, str]) -> str:
    """`vllm_embedding_model` on `model` (the pooling runner; the tiny embedding model's Llama
    converted to an embedding model) and `openai_embeddings` in front of it; returns the served name."""
    served = embedding_name(model)
    target = repo / EMBEDDING_TARGET
    (target / "1").mkdir(parents=True)
    (target / "config.pbtxt").write_text((repo / "vllm_model" / "config.pbtxt").read_text())
    extra = EMBEDDING_ENGINE_ARGS if model == TINY_EMBED.resolve() else {"runner": "pooling"}
    args = {"model": str(model), "served_model_name": served, **cpu_engine_args(model, extra)}
    (target / "1" / "model.json").write_text(json.dumps(args, indent=2) + "\n")
    config_path = repo / EMBEDDINGS / "config.pbtxt"
    config = config_path.read_text()
    for key, value in {"target_model": EMBEDDING_TARGET, "served_model_name": served, **loopback}.items():
        config = set_parameter(config, key, value)
    config_path.write_text(config)
    return served


def main() -> None:
    args = parser().parse_args()
    repo, served, model = prepare(args)
    server = TritonServer(repo, args.http_port, args.grpc_port, args.metrics_port)
    # SIGTERM (docker stop, systemd, kill) ends the server like Ctrl-C: the handler only
    # interrupts whatever the main thread waits in, and `finally` stops everything.
    signal.signal(signal.SIGTERM, _interrupt)
    server.start()
    code = 0
    try:
        server.wait_ready(timeout=600)
        example = {"model": served, "messages": [{"role": "user", "content": "Hello!"}], "stream": True}
        anthropic = {**example, "max_tokens": 32}
        responses = {"model": served, "input": "Hello!", "stream": True}
        embeddings = ""
        if args.embedding_model:
            embedding = {"model": embedding_name(Path(args.embedding_model).resolve()), "input": ["Hello!", "Bye!"]}
            embeddings = (f"OpenAI embeddings:\n  curl -s localhost:{args.http_port}/v2/models/{EMBEDDINGS}/generate "
                          f"-d '{json.dumps({'request': json.dumps(embedding)})}'\n")
        print(
            f"\nServing {served!r} ({model}) on http://localhost:{args.http_port}. Try:\n"
            f"  curl -sN localhost:{args.http_port}/v2/models/openai_chat/generate_stream "
            f"-d '{json.dumps({'request': json.dumps(example)})}'\n"
            f"Anthropic Messages:\n"
            f"  curl -sN localhost:{args.http_port}/v2/models/anthropic_messages/generate_stream "
            f"-d '{json.dumps({'request': json.dumps(anthropic)})}'\n"
            f"OpenAI Responses:\n"
            f"  curl -sN localhost:{args.http_port}/v2/models/openai_responses/generate_stream "
            f"-d '{json.dumps({'request': json.dumps(responses)})}'\n" + embeddings,
            flush=True,
        )
        code = server.process.wait()
        print(f"tritonserver exited by itself with status {code}", file=sys.stderr, flush=True)
        code = code or 1
    except KeyboardInterrupt:
        print("\nstopping tritonserver...", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.stop(timeout=30)
    sys.exit(code)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
