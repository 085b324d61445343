"""Settings of an `openai_chat` model instance, read from its `config.pbtxt` parameters.

Where a setting is not given, it is found from the generation model: when the target is
a vLLM model in the same repository, its `model.json` names the model files (for the
tokenizer and chat template), the served model name and the context length.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .parsers.base import get_reasoning_parser, get_tool_parser

log = logging.getLogger(__name__)

REQUEST_FORMATS = ("vllm", "trtllm", "tensorrt_llm")
TRANSPORTS = ("grpc", "bls")


class ConfigError(ValueError):
    """A configuration mistake; raised at model load so the model fails to load with a clear message."""


@dataclass(frozen=True)
class Settings:
    target_model: str = "vllm_model"
    target_model_version: int = -1
    request_format: str = "vllm"
    transport: str = "grpc"
    grpc_url: str = "localhost:8001"
    grpc_cancel: str = "auto"
    tokenizer: str = ""
    served_model_name: str = ""
    max_model_len: int = 0
    default_max_tokens: int = 0
    chat_template_content_format: str = "auto"
    trust_request_chat_template: str = "false"
    structured_outputs_key: str = "structured_outputs"
    lora_separator: str = ""
    # TensorRT-LLM formats: input names that changed between releases, what the model
    # returns, special ids (-1: the tokenizer's), LoRA task ids ("name:id,name:id").
    trtllm_seed_input: str = "seed"
    trtllm_min_tokens_input: str = "min_tokens"
    trtllm_token_counts: str = "true"
    end_id: int = -1
    pad_id: int = -1
    lora_task_ids: str = ""
    tool_call_parser: str = ""
    reasoning_parser: str = ""
    reasoning_field: str = "reasoning_content"
    cancel_check_interval_ms: int = 100
    responder_threads: int = 4
    idle_timeout_s: float = 600.0
    # Everything from the target's model.json, when there is one (for reference only).
    target_engine_args: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # LoRA adapters the target vLLM model serves (enable_lora and 1/multi_lora.json).
    lora_adapters: tuple[str, ...] = ()

    @property
    def trusts_request_chat_template(self) -> bool:
        return _true(self.trust_request_chat_template)

    @property
    def lora_task_id_map(self) -> dict[str, int]:
        mapping = {}
        for item in filter(None, (part.strip() for part in self.lora_task_ids.split(","))):
            name, sep, task_id = item.rpartition(":")
            if not sep or not name or not task_id.isdigit():
                raise ConfigError(f"parameter 'lora_task_ids' must look like 'name:1,other:2'; got {item!r}")
            mapping[name] = int(task_id)
        return mapping

    @classmethod
    def from_parameters(cls, parameters: dict[str, str], model_repository: str | Path | None) -> Settings:
        """Build settings from flat `{key: string value}` parameters and the model's own directory."""
        known = {f.name: f for f in fields(cls) if f.name not in ("target_engine_args", "lora_adapters")}
        values: dict[str, Any] = {}
        for key, raw in parameters.items():
            if key not in known:
                continue
            raw = raw.strip()
            if raw == "" or raw.startswith("${"):
                continue
            kind = type(getattr(cls, key)) if hasattr(cls, key) else str
            try:
                values[key] = kind(raw)
            except ValueError:
                raise ConfigError(f"parameter {key!r} must be a {kind.__name__}, got {raw!r}") from None
        settings = cls(**values)
        if settings.request_format not in REQUEST_FORMATS:
            raise ConfigError(
                f"parameter 'request_format' must be one of {', '.join(REQUEST_FORMATS)}; got {settings.request_format!r}"
            )
        if settings.transport not in TRANSPORTS:
            raise ConfigError(f"parameter 'transport' must be one of {', '.join(TRANSPORTS)}; got {settings.transport!r}")
        if settings.grpc_cancel not in ("auto", "true", "false"):
            raise ConfigError(f"parameter 'grpc_cancel' must be auto, true or false; got {settings.grpc_cancel!r}")
        for key, lookup in (("tool_call_parser", get_tool_parser), ("reasoning_parser", get_reasoning_parser)):
            name = getattr(settings, key)
            if name:
                try:
                    lookup(name)
                except ValueError as exc:
                    raise ConfigError(f"parameter {key!r}: {exc}") from None
        if settings.reasoning_field not in ("reasoning_content", "reasoning"):
            raise ConfigError("parameter 'reasoning_field' must be reasoning_content or reasoning")
        if settings.chat_template_content_format not in ("auto", "string", "openai"):
            raise ConfigError("parameter 'chat_template_content_format' must be auto, string or openai")
        return settings._resolve(Path(model_repository) if model_repository else None)

    def _resolve(self, model_dir: Path | None) -> Settings:
        engine_args, version_dir = read_target_engine_args(model_dir, self.target_model, self.target_model_version)
        tokenizer = self.tokenizer or engine_args.get("tokenizer") or engine_args.get("model") or ""
        if not tokenizer:
            raise ConfigError(
                "no tokenizer: set the 'tokenizer' parameter, or serve a vLLM target model whose "
                "model.json names its model in the same repository"
            )
        served = self.served_model_name or _first(engine_args.get("served_model_name")) or engine_args.get("model")
        if not served:
            served = self.target_model
        max_len = self.max_model_len or int(engine_args.get("max_model_len") or 0)
        adapters = read_lora_adapters(engine_args, version_dir) or tuple(self.lora_task_id_map)
        return replace(
            self,
            tokenizer=str(tokenizer),
            served_model_name=str(served),
            max_model_len=max_len,
            target_engine_args=engine_args,
            lora_adapters=adapters,
        )


def _true(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes")


def _first(value):
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


def flatten_parameters(model_config: dict) -> dict[str, str]:
    """`{"k": {"string_value": "v"}}` (Triton's config JSON) -> `{"k": "v"}`."""
    return {k: v.get("string_value", "") for k, v in (model_config.get("parameters") or {}).items()}
