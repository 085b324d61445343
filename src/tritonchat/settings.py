"""Settings of an `openai_chat` model instance: one typed table, read from `config.pbtxt` parameters.

Where a setting is not given, it is found from the generation model: when the target is
a vLLM model in the same repository, its `model.json` names the model files (for the
tokenizer and chat template), the served model name and the context length.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .parsers.base import get_reasoning_parser, get_tool_parser
from .repository import first_value, read_lora_adapters, read_target_engine_args

log = logging.getLogger(__name__)

REQUEST_FORMATS = ("vllm", "trtllm", "tensorrt_llm", "llmapi")
TRANSPORTS = ("http", "grpc", "bls")


def setting(default: Any, meaning: str, choices: tuple[str, ...] = (), user: bool = False):
    """One `config.pbtxt` parameter: its default, what it means (docs/configuration.md's table is made from
    this), the values it may take, and whether the shipped config.pbtxt lists it (`user`:
    a parameter most deployments set)."""
    return field(default=default, metadata={"meaning": meaning, "choices": choices, "user": user})


@dataclass(frozen=True)
class Settings:
    """Every parameter of `openai_chat` / `openai_completions`, declared once."""

    target_model: str = setting("vllm_model", "generation model this model calls", user=True)
    target_model_version: int = setting(-1, "its version (-1: latest)")
    request_format: str = setting(
        "vllm",
        "the target's tensor interface: `vllm` (Triton's vLLM backend), `trtllm` (NVIDIA's TensorRT-LLM `ensemble` / "
        "`tensorrt_llm_bls`), `tensorrt_llm` (the `tensorrt_llm` model itself, token ids) or `llmapi` (TensorRT-LLM's "
        "LLM API model); see "
        "[TensorRT-LLM](backends.md#tensorrt-llm)",
        REQUEST_FORMATS,
        user=True,
    )
    transport: str = setting(
        "http",
        "how the generation stream is read: `http` (a `generate_stream` request to this server's HTTP endpoint), "
        "`grpc` (a streaming call to its gRPC endpoint; needs the `grpc` extra, `tritonchat[grpc]`) or `bls` "
        "(Python-backend BLS); see "
        "[Transports](design.md#transports-http-grpc-and-bls)",
        TRANSPORTS,
        user=True,
    )
    http_url: str = setting("localhost:8000", "this server's HTTP endpoint, for `transport: http` and for reading the target's configuration", user=True)
    grpc_url: str = setting("localhost:8001", "this server's gRPC endpoint, for `transport: grpc`", user=True)
    vllm_stream_whole: bool = setting(
        False,
        "`request_format: vllm`: ask the vLLM backend for a stream also for a whole (non-streamed) answer, and "
        "assemble it here, instead of asking for one response (measured slower and costlier here: see "
        "[Whole answers](benchmarks.md#whole-answers-one-response-or-a-stream-from-the-vllm-backend))",
    )
    http_keepalive_s: float = setting(
        2.0,
        "`transport: http`: an idle loopback connection is closed after this many seconds (0: a connection per "
        "call). Triton waits at shutdown until its HTTP connections close, so this bounds how long a stopping "
        "server waits for them; a busy instance reuses its connections whatever the value",
    )
    loopback_headers: str = setting(
        "",
        "`name=value,...` headers the `http` and `grpc` transports send with every call, for a server that "
        "restricts its inference endpoints (`--http-restricted-api` / `--grpc-restricted-protocol` "
        "`inference:name=value`; over gRPC the header is `triton-grpc-protocol-<name>`, as Triton wants)",
    )
    grpc_cancel: bool = setting(
        False,
        "`transport: grpc`: cancel a call no longer wanted (client gone, stop string, error) instead of reading it to "
        "its end; cancelling crashes Triton 2.51 under load (see "
        "[Disconnects](design.md#disconnects-and-the-grpc-cancellation-race)): only on a release that passes `tools/storm.py`",
    )
    grpc_max_draining: int = setting(
        64,
        "`transport: grpc`: calls given up but still read to their end (see `grpc_cancel`) that an instance lets run at "
        "once; while that many drain, new calls wait to start, so abandoned generations cannot starve wanted ones "
        "(0: no limit)",
    )
    tokenizer: str = setting(
        "", "tokenizer and chat template; empty: the target's `model.json` `tokenizer`, else its `model`", user=True
    )
    served_model_name: str = setting(
        "", "the name clients send as `model`; empty: `model.json` `served_model_name`, else its `model`", user=True
    )
    max_model_len: int = setting(
        0, "context length; 0: `model.json` `max_model_len`, else the model's config.json", user=True
    )
    default_max_tokens: int = setting(
        0, "completion budget when a request sets none; 0: whatever fits in the context for Chat Completions, 16 for "
        "(legacy) Completions, as OpenAI and vLLM")
    chat_template_content_format: str = setting(
        "auto",
        "message content as a `string` or as OpenAI parts (`openai`); `auto` reads the template",
        ("auto", "string", "openai"),
    )
    trust_request_chat_template: bool = setting(False, "whether a request may bring its own `chat_template`")
    structured_outputs_key: str = setting(
        "",
        "the vLLM backend's sampling-parameters key for constrained generation; empty: the target's, read from "
        "the server at the first request (`structured_outputs` from Triton 25.11, `guided_decoding` in "
        "25.01-25.10, none before)",
    )
    lora_separator: str = setting(
        "",
        "with e.g. `:`, `\"model\": \"<served>:<adapter>\"` selects a LoRA adapter from the vLLM model's "
        "`multi_lora.json`",
    )
    trtllm_seed_input: str = setting(
        "", "TensorRT-LLM formats: name of the seed input; empty: the target's (`seed`, or `random_seed` before "
        "TensorRT-LLM's rename), read from the server at the first request"
    )
    trtllm_min_tokens_input: str = setting(
        "", "TensorRT-LLM formats: name of the minimum-length input; empty: the target's (`min_tokens`, or "
        "`min_length` in older releases)"
    )
    trtllm_token_counts: str = setting(
        "auto",
        "`trtllm`: ask the ensemble for `num_input_tokens` / `num_output_tokens`; `auto`: when the target has them "
        "(else counted with the tokenizer)",
        ("auto", "true", "false"),
    )
    trtllm_skip_special_tokens: bool = setting(
        True,
        "`trtllm`: whether the ensemble's postprocessing model drops special tokens (its `skip_special_tokens` "
        "parameter, true by default); a tool-call parser that needs them refuses to load while true",
    )
    end_id: int = setting(
        -1,
        "TensorRT-LLM formats: end token id sent with every request; -1: `trtllm` sends none (NVIDIA's preprocessing "
        "fills it in), `tensorrt_llm` sends the tokenizer's EOS",
    )
    pad_id: int = setting(
        -1, "TensorRT-LLM formats: padding token id; -1: `trtllm` sends none, `tensorrt_llm` the tokenizer's (else EOS)"
    )
    lora_task_ids: str = setting(
        "",
        "TensorRT-LLM formats: `adapter:task_id,...`; `\"model\": \"<served><lora_separator><adapter>\"` sends that "
        "`lora_task_id` (the adapter's weights must already be in the engine's LoRA cache)",
    )
    lora_paths: str = setting(
        "",
        "`llmapi`: `adapter=/path/on/the/server,...`; `\"model\": \"<served><lora_separator><adapter>\"` sends that "
        "adapter's `lora_name`, `lora_path` and an id (its place in the sorted list, from 1)",
    )
    tool_call_parser: str = setting(
        "", "`hermes`, `llama3_json`, `mistral`, `pythonic`, `qwen3_coder`, `deepseek_v3`, `deepseek_v31`, `kimi_k2`, "
        "`granite`, `llama4_pythonic` or `openai` (gpt-oss); empty: `tool_choice: \"auto\"` is refused", user=True
    )
    reasoning_parser: str = setting(
        "", "`deepseek_r1`, `qwen3` or `openai_gptoss` (gpt-oss); empty: reasoning stays in `content`", user=True)
    reasoning_field: str = setting(
        "reasoning", "the response field for reasoning: vLLM's current `reasoning`, or `reasoning_content` (its "
        "earlier name, also DeepSeek's); both are accepted in history", ("reasoning", "reasoning_content")
    )
    cancel_check_interval_ms: int = setting(100, "how often a stream checks whether its client went away")
    responder_threads: int = setting(4, "threads that build and send responses (each request stays on one)")
    stream_interval: int = setting(
        1,
        "streamed chunks carry at least this many tokens, except the first and the last (vLLM's `--stream-interval`, "
        "applied here for every request format; a request's `stream_interval` may raise it): fewer, larger chunks "
        "cost less per token (see [Coalescing](benchmarks.md#coalescing-stream_interval))",
    )
    max_open_requests: int = setting(
        256,
        "requests one instance serves at once (being prepared or streaming, BLS ones also waiting for their "
        "stream); beyond it a request is refused at once with a 503 `service_unavailable` (0: no limit)",
    )
    max_request_bytes: int = setting(16 * 1024 * 1024, "largest request body in bytes (a larger one: 400)")
    max_messages: int = setting(2048, "most `messages` in a chat request")
    max_content_chars: int = setting(
        2_000_000, "most characters in all message contents (chat) or the prompt (completions) together"
    )
    max_n: int = setting(16, "most choices (`n`) a request may ask for (each is one generation)")
    max_completion_tokens_limit: int = setting(
        0, "largest `max_tokens` / `max_completion_tokens` a request may ask for (0: what fits in the context)"
    )
    max_tools: int = setting(128, "most `tools` in a request")
    max_logit_bias: int = setting(300, "most `logit_bias` entries")
    image_inputs: str = setting(
        "auto",
        "whether user messages may carry images (`image_url` parts, see [Images](api.md#images)): `auto`: unless the "
        "model's config.json (in the `tokenizer` directory) has no vision part (`vision_config`, `vision_tower`, "
        "...); `true`: always (the generation model decides); `false`: never",
        ("auto", "true", "false"),
    )
    max_images: int = setting(8, "most images in a chat request")
    max_image_bytes: int = setting(20 * 1024 * 1024, "largest image file in bytes (decoded, or fetched)")
    image_url_allowlist: str = setting(
        "",
        "`http(s)` URL prefixes, comma-separated, from which images may be fetched (e.g. "
        "`https://images.example.com/`); empty: none, only `data:` URLs",
    )
    image_fetch_timeout_s: float = setting(10.0, "time allowed to fetch one image from an allowed URL")
    text_output: bool = setting(
        False,
        "also send a plain `text_output` output with each response: its new text (the choices' content, or "
        "`text`, in order; empty for role-only and usage chunks), for benchmark tools that read text "
        "(see [Benchmark](benchmarks.md#standard-tools-aiperf))",
    )
    metrics: bool = setting(True, "report `tritonchat_*` metrics on Triton's metrics endpoint (see [Metrics](deployment.md#metrics))")
    first_token_stages: bool = setting(
        False,
        "with `metrics`: also report `tritonchat_first_token_stage_seconds`, each streamed request's first token "
        "by stage (four more metric updates per request; `make bench` turns it on)",
    )
    idle_timeout_s: float = setting(
        600.0, "a generation model silent this long ends the request with a 503 error (0: never)"
    )
    engine: str = setting(
        "target",
        "where the text is generated: `target` (by `target_model`, read over `transport`) or `inprocess` (by a vLLM "
        "engine in this model's own process, made from the `model.json` engine arguments, and `multi_lora.json`, in "
        "this model's version directory, as Triton's vLLM backend reads them; `target_model`, `transport` and their "
        "settings are then unused, `request_format` must be `vllm`); see "
        "[In-process engine](design.md#in-process-engine-engine-inprocess)",
        ("target", "inprocess"),
    )
    # Found at load, not a parameter: the version directory whose model.json an in-process engine reads.
    engine_dir: str = field(default="", metadata={"parameter": False})
    # Found at load, not a parameter: the LoRA adapters the target vLLM model serves.
    lora_adapters: tuple[str, ...] = field(default=(), metadata={"parameter": False})

    @property
    def loopback_header_map(self) -> dict[str, str]:
        headers = {}
        for item in filter(None, (part.strip() for part in self.loopback_headers.split(","))):
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"parameter 'loopback_headers' must look like 'name=value,...'; got {item!r}")
            headers[name.strip().lower()] = value.strip()
        return headers

    @property
    def image_url_prefixes(self) -> tuple[str, ...]:
        prefixes = tuple(filter(None, (part.strip() for part in self.image_url_allowlist.split(","))))
        for prefix in prefixes:
            scheme, sep, rest = prefix.partition("://")
            if not sep or scheme.lower() not in ("http", "https") or not rest:
                raise ConfigError(f"parameter 'image_url_allowlist' takes http:// or https:// URL prefixes; got {prefix!r}")
        return prefixes

    @property
    def lora_task_id_map(self) -> dict[str, int]:
        mapping = {}
        for item in filter(None, (part.strip() for part in self.lora_task_ids.split(","))):
            name, sep, task_id = item.rpartition(":")
            if not sep or not name or not task_id.isdigit():
                raise ConfigError(f"parameter 'lora_task_ids' must look like 'name:1,other:2'; got {item!r}")
            mapping[name] = int(task_id)
        return mapping

    @property
    def lora_path_map(self) -> dict[str, str]:
        mapping = {}
        for item in filter(None, (part.strip() for part in self.lora_paths.split(","))):
            name, sep, path = item.partition("=")
            if not sep or not name.strip() or not path.strip():
                raise ConfigError(f"parameter 'lora_paths' must look like 'name=/path,other=/path'; got {item!r}")
            mapping[name.strip()] = path.strip()
        return mapping

    @classmethod
    def from_parameters(cls, parameters: dict[str, str], model_repository: str | Path | None) -> Settings:
        """Build settings from flat `{key: string value}` parameters and the model's own directory."""
        known = {f.name: f for f in parameter_fields()}
        values: dict[str, Any] = {}
        for key, raw in parameters.items():
            if key not in known:
                continue
            raw = raw.strip()
            if raw == "" or raw.startswith("${"):
                continue
            values[key] = _convert(known[key], raw)
        settings = cls(**values)
        if settings.stream_interval < 1:
            raise ConfigError(f"parameter 'stream_interval' must be at least 1, got {settings.stream_interval}")
        for key, lookup in (("tool_call_parser", get_tool_parser), ("reasoning_parser", get_reasoning_parser)):
            name = getattr(settings, key)
            if name:
                try:
                    lookup(name)
                except ValueError as exc:
                    raise ConfigError(f"parameter {key!r}: {exc}") from None
        settings.lora_task_id_map  # noqa: B018  (raises ConfigError when malformed)
        settings.lora_path_map  # noqa: B018
        settings.loopback_header_map  # noqa: B018
        settings.image_url_prefixes  # noqa: B018
        return settings._resolve(Path(model_repository) if model_repository else None)

    def _resolve(self, model_dir: Path | None) -> Settings:
        engine_args, version_dir = read_target_engine_args(model_dir, self.target_model, self.target_model_version)
        tokenizer = self.tokenizer or engine_args.get("tokenizer") or engine_args.get("model") or ""
        if not tokenizer:
            raise ConfigError(
                "no tokenizer: set the 'tokenizer' parameter, or serve a vLLM target model whose "
                "model.json names its model in the same repository"
            )
        served = self.served_model_name or first_value(engine_args.get("served_model_name")) or engine_args.get("model")
        if not served:
            served = self.target_model
        max_len = self.max_model_len or int(engine_args.get("max_model_len") or 0)
        adapters = read_lora_adapters(engine_args, version_dir) or tuple(self.lora_task_id_map) or tuple(
            self.lora_path_map)
        return replace(self, tokenizer=str(tokenizer), served_model_name=str(served), max_model_len=max_len,
                       lora_adapters=adapters)


def parameter_fields() -> list:
    """The settings that are `config.pbtxt` parameters, in declaration order."""
    return [f for f in fields(Settings) if f.metadata.get("parameter", True)]


_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no")


def _convert(spec, raw: str) -> Any:
    kind = type(spec.default)
    if kind is bool:
        if raw.lower() not in _TRUE + _FALSE:
            raise ConfigError(f"parameter {spec.name!r} must be true or false, got {raw!r}")
        return raw.lower() in _TRUE
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"parameter {spec.name!r} must be a {kind.__name__}, got {raw!r}") from None
    choices = spec.metadata["choices"]
    if choices and value not in choices:
        raise ConfigError(f"parameter {spec.name!r} must be one of {', '.join(choices)}; got {raw!r}")
    return value


def check_parameters(parameters: dict[str, str]) -> None:
    """For tools that set chat model parameters by hand (`make serve --chat-parameter`): an unknown
    key or a value the model would refuse is a ConfigError naming the parameter (unlike a
    config.pbtxt, which may carry parameters meant for others)."""
    known = [spec.name for spec in parameter_fields()]
    for key in parameters:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else " (see docs/configuration.md)"
            raise ConfigError(f"unknown chat model parameter {key!r}{hint}")
    Settings.from_parameters({"tokenizer": "-", **parameters}, None)


def flatten_parameters(model_config: dict) -> dict[str, str]:
    """`{"k": {"string_value": "v"}}` (Triton's config JSON) -> `{"k": "v"}`."""
    return {k: v.get("string_value", "") for k, v in (model_config.get("parameters") or {}).items()}
