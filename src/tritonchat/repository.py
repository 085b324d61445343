"""Prepare a runnable copy of the model repository for a given model on disk.

The committed `model_repository/` is complete except for where the model files are: the
vLLM model's `1/model.json` names them. This command copies the repository and writes
that file with the model path, the served name and any engine-argument overrides, so the
same repository serves the embedded tiny model locally and a real model in a container:

    python -m tritonchat.repository --src model_repository --dst /tmp/repo \\
        --model /models/hf --served-model-name my-model --engine-arg max_model_len=8192
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path
from typing import Any

from .errors import ConfigError

CHAT_MODELS = ("openai_chat", "openai_completions", "anthropic_messages", "openai_responses")


def parse_engine_arg(item: str) -> tuple[str, object]:
    """`key=value`; the value is JSON when it parses as JSON (numbers, booleans), else a string."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {item!r}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


# config.json keys that hold a model's context length, in vLLM's order of preference.
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length",
                 "model_max_length", "n_ctx")


def config_context_length(model_dir: str | Path) -> int:
    """The context length in a Hugging Face model directory's config.json (also a nested
    `text_config`, as multimodal models have), or 0 if it names none."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return 0
    for section in (config, config.get("text_config") or {}):
        for key in _CONTEXT_KEYS:
            value = section.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return 0


def config_vocab_size(model_dir: str | Path) -> int:
    """The vocabulary size in a Hugging Face model directory's config.json (`vocab_size`, or a
    nested `text_config`'s, as vLLM counts it), or 0 if it names none."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return 0
    for section in (config, config.get("text_config") or {}):
        value = section.get("vocab_size")
        if isinstance(value, int) and value > 0:
            return value
    return 0


def generation_eos_ids(model_dir: str | Path) -> list[int]:
    """The ids that end a turn in generation_config.json (`eos_token_id`: an id or a list),
    e.g. Llama 3's `<|end_of_text|>` and `<|eot_id|>`; [] without the file."""
    try:
        value = json.loads((Path(model_dir) / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, ValueError):
        return []
    values = value if isinstance(value, list) else [value]
    return [int(v) for v in values if isinstance(v, int)]


def set_parameter(config: str, key: str, value: str) -> str:
    """Set (or add) `parameters { key: ... }` in config.pbtxt text."""
    pattern = re.compile(r'parameters\s*\{\s*key:\s*"' + re.escape(key) + r'".*?\}\s*\}', re.DOTALL)
    entry = f'parameters {{ key: "{key}", value: {{ string_value: "{value}" }} }}'
    if pattern.search(config):
        return pattern.sub(lambda _: entry, config, count=1)
    return config.rstrip() + "\n" + entry + "\n"


def prepare_repository(
    src: Path,
    dst: Path,
    *,
    model: str | None = None,
    served_model_name: str | None = None,
    engine_args: dict | None = None,
    vllm_model: str = "vllm_model",
    only: list[str] | None = None,
    chat_parameters: dict[str, str] | None = None,
) -> Path:
    """Copy `src` to `dst` (replacing it), rewrite `<vllm_model>/1/model.json`, and set
    `chat_parameters` (and `served_model_name`) in the chat and completions models' config.pbtxt."""
    if dst.exists():
        shutil.rmtree(dst)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    dst.mkdir(parents=True)
    for model_dir in sorted(p for p in src.iterdir() if p.is_dir()):
        if only is None or model_dir.name in only:
            shutil.copytree(model_dir, dst / model_dir.name, ignore=ignore)
    model_json = dst / vllm_model / "1" / "model.json"
    if model_json.parent.is_dir():
        args = json.loads(model_json.read_text()) if model_json.is_file() else {}
        if model:
            args["model"] = str(model)
        if served_model_name:
            args["served_model_name"] = served_model_name
        args.update(engine_args or {})
        model_json.write_text(json.dumps(args, indent=2) + "\n")
    if served_model_name:  # also on the chat models, where clients (the gateway's /v1/models) can read it
        chat_parameters = {"served_model_name": served_model_name, **(chat_parameters or {})}
    for name in CHAT_MODELS:
        config_path = dst / name / "config.pbtxt"
        if chat_parameters and config_path.is_file():
            config = config_path.read_text()
            for key, value in chat_parameters.items():
                config = set_parameter(config, key, value)
            config_path.write_text(config)
    return dst


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, required=True, help="the committed model repository")
    parser.add_argument("--dst", type=Path, required=True, help="where to write the runnable copy")
    parser.add_argument("--model", help="model files (directory or Hugging Face id) for the vLLM model")
    parser.add_argument("--served-model-name", help="the name clients put in 'model'")
    parser.add_argument(
        "--engine-arg", action="append", default=[], type=parse_engine_arg, help="vLLM engine argument key=value"
    )
    parser.add_argument(
        "--chat-parameter", action="append", default=[], type=parse_engine_arg,
        help="config.pbtxt parameter key=value of openai_chat, openai_completions, anthropic_messages and "
             "openai_responses (e.g. grpc_url=localhost:9001)",
    )
    args = parser.parse_args(argv)
    dst = prepare_repository(
        args.src,
        args.dst,
        model=args.model,
        served_model_name=args.served_model_name,
        engine_args=dict(args.engine_arg),
        chat_parameters={k: str(v) for k, v in args.chat_parameter},
    )
    print(dst)


if __name__ == "__main__":
    main()


def first_value(value):
    """The first element of a list (None when empty), or the value itself."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


def read_target_engine_args(model_dir: Path | None, target: str, version: int) -> tuple[dict[str, Any], Path | None]:
    """The target model's `model.json` (vLLM engine arguments) and its version directory."""
    if model_dir is None:
        return {}, None
    target_dir = model_dir.parent / target
    if not target_dir.is_dir():
        return {}, None
    if version > 0:
        version_dir = target_dir / str(version)
    else:
        versions = sorted((int(p.name) for p in target_dir.iterdir() if p.is_dir() and p.name.isdigit()), reverse=True)
        if not versions:
            return {}, None
        version_dir = target_dir / str(versions[0])
    path = version_dir / "model.json"
    if not path.is_file():
        return {}, version_dir
    try:
        return json.loads(path.read_text()), version_dir
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None


def read_lora_adapters(engine_args: dict[str, Any], version_dir: Path | None) -> tuple[str, ...]:
    """Adapter names of a vLLM model with LoRA enabled: the keys of its `multi_lora.json`."""
    enabled = engine_args.get("enable_lora")
    if isinstance(enabled, str):
        enabled = enabled.lower() == "true"
    if not enabled or version_dir is None:
        return ()
    path = version_dir / "multi_lora.json"
    if not path.is_file():
        return ()
    try:
        return tuple(json.loads(path.read_text()))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
