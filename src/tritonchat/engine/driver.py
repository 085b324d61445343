"""A vLLM `AsyncLLM` as both of its users here run it: the local vLLM backend
(harness/local_vllm_backend/model.py, Triton's vLLM backend's stand-in) and the chat models'
in-process engine (transports/inprocess.py).

    EngineConfig.read(version_dir)   model.json (AsyncEngineArgs keywords) and multi_lora.json
    device_environment(...)          KIND_GPU: one GPU per instance; multi-GPU needs KIND_MODEL
    build_sampling_params(json)      the vLLM backend's sampling-parameters JSON -> SamplingParams
    create_engine / shutdown_engine  on the event loop that will read the engine's outputs
    render_prompt(engine, text, images)

vLLM is imported only when an engine is made (`vllm_api`): importing it takes seconds, and
NVIDIA's TensorRT-LLM containers have none.
"""

from __future__ import annotations

import base64
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

ENGINE_ARGS_FILENAME = "model.json"
MULTI_LORA_FILENAME = "multi_lora.json"

_vllm: SimpleNamespace | None = None


def vllm_api() -> SimpleNamespace:
    """The vLLM names the driver uses, imported at the first call."""
    global _vllm
    if _vllm is None:
        from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: PLC0415
        from vllm.lora.request import LoRARequest  # noqa: PLC0415
        from vllm.sampling_params import RequestOutputKind, SamplingParams  # noqa: PLC0415
        from vllm.v1.engine.async_llm import AsyncLLM  # noqa: PLC0415

        try:  # the constraint's class and SamplingParams field: vLLM >= 0.11, then older releases
            from vllm.sampling_params import StructuredOutputsParams as constraint  # noqa: PLC0415
            constraint_field = "structured_outputs"
        except ImportError:
            from vllm.sampling_params import GuidedDecodingParams as constraint  # noqa: PLC0415
            constraint_field = "guided_decoding"
        try:  # vLLM >= 0.12: prompts are rendered by the engine's renderer before `generate`
            from vllm.renderers.inputs.preprocess import parse_model_prompt  # noqa: PLC0415
        except ImportError:  # older vLLM: `generate` takes the prompt dict itself
            parse_model_prompt = None
        _vllm = SimpleNamespace(
            AsyncEngineArgs=AsyncEngineArgs, AsyncLLM=AsyncLLM, LoRARequest=LoRARequest,
            SamplingParams=SamplingParams, RequestOutputKind=RequestOutputKind, Constraint=constraint,
            constraint_field=constraint_field, parse_model_prompt=parse_model_prompt)
    return _vllm


# ---- configuration -----------------------------------------------------------------------------


@dataclass
class EngineConfig:
    """An engine's arguments as Triton's vLLM backend reads them from a model's version
    directory: `model.json` (keyword arguments of `AsyncEngineArgs`) and, with `enable_lora`,
    `multi_lora.json` (adapter name -> path; each adapter's LoRA id is its place there, from 1)."""

    version_dir: Path
    args: dict[str, Any]
    lora_paths: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, version_dir: str | Path) -> EngineConfig:
        version_dir = Path(version_dir)
        path = version_dir / ENGINE_ARGS_FILENAME
        if not path.is_file():
            raise FileNotFoundError(
                f"'{ENGINE_ARGS_FILENAME}' containing vllm engine args must be provided in '{version_dir}'")
        with open(path, encoding="utf-8") as file:
            args = json.load(file)
        config = cls(version_dir, args)
        if config.lora_enabled:
            lora_path = version_dir / MULTI_LORA_FILENAME
            try:
                with open(lora_path, encoding="utf-8") as file:
                    config.lora_paths = json.load(file)
            except FileNotFoundError:
                raise FileNotFoundError(f"Triton backend cannot find {lora_path}.") from None
        return config

    @property
    def lora_enabled(self) -> bool:
        return str(self.args.get("enable_lora", False)).lower() == "true"

    @property
    def lora_names(self) -> list[str]:
        return list(self.lora_paths)

    @property
    def world_size(self) -> int:
        return int(self.args.get("tensor_parallel_size", 1)) * int(self.args.get("pipeline_parallel_size", 1))

    def lora_refusal(self, lora_name: str | None) -> str | None:
        """Why a request naming this adapter cannot be served (the vLLM backend's words), or None."""
        if lora_name is None:
            return None
        if not self.lora_enabled:
            return "LoRA feature is not enabled."
        if lora_name not in self.lora_paths:
            return f"LoRA {lora_name} is not supported, we currently support {self.lora_names}"
        return None

    def lora_request(self, lora_name: str | None):
        """vLLM's `LoRARequest` for an adapter of multi_lora.json (None: no adapter)."""
        if lora_name is None:
            return None
        lora_id = self.lora_names.index(lora_name) + 1
        return vllm_api().LoRARequest(str(lora_id), lora_id, self.lora_paths[lora_name])


def device_environment(kind: str | None, device_id: int | str | None, config: EngineConfig) -> None:
    """Where the engine runs, from Triton's instance kind: KIND_GPU pins an instance to its GPU
    (one engine per GPU), which takes single-GPU engines only; KIND_MODEL (and KIND_CPU) leave
    the GPUs to the engine's own tensor / pipeline parallelism."""
    if kind != "GPU":
        return
    if config.world_size > 1:
        raise ValueError(
            "KIND_GPU is currently for single-GPU models, please specify KIND_MODEL "
            "in the model's config.pbtxt for multi-GPU models")
    if device_id is not None and int(device_id) >= 0:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device_id)


# ---- requests ------------------------------------------------------------------------------------

# SamplingParams fields whose annotation is exactly one of these are cast with the constructor, so
# JSON strings such as "0.1" or "100" are accepted (note: bool("false") is True, as in Triton's
# vLLM backend). Other fields are passed through unchanged.
_CASTS = ((int, int), (float, float), (bool, bool), (str, str), (Optional[int], int))
# The keys a constrained-generation spec may come under: the current one and the one of vLLM
# 0.8-0.10 (Triton 25.01-25.10); either is given to the installed vLLM under its own.
CONSTRAINT_KEYS = ("structured_outputs", "guided_decoding")


def _cast_for(annotation):
    # Compared with == (not a dict lookup): some annotations are not hashable.
    return next((cast for kind, cast in _CASTS if annotation == kind), None)


class SamplingParamsError(ValueError):
    """vLLM refused to build `SamplingParams` from a request's sampling parameters."""


def build_sampling_params(params: str | dict, output_kind=None,
                          constraint_keys: tuple[str, ...] = CONSTRAINT_KEYS) -> tuple[Any, str | None]:
    """The vLLM backend's sampling-parameters JSON (or its dict) as vLLM `SamplingParams`, and
    the LoRA adapter it names (`lora_name`, else None). The constraint (`structured_outputs`)
    is itself a JSON string, as the backend takes it, under one of `constraint_keys`. `output_kind`: vLLM's
    `RequestOutputKind` (default: its CUMULATIVE). Whatever fails (malformed JSON, unknown keys,
    values a cast or `SamplingParams` refuses, bad constraints) raises `SamplingParamsError`
    from its cause; values vLLM refuses only in the engine fail later, when the request is added."""
    api = vllm_api()
    try:
        params = dict(json.loads(params) if isinstance(params, str) else params)
        lora_name = params.pop("lora_name", None)
        annotations = api.SamplingParams.__annotations__
        for key, value in list(params.items()):
            if key in constraint_keys:
                del params[key]
                params[api.constraint_field] = api.Constraint(**json.loads(value))
            elif key in annotations and (cast := _cast_for(annotations[key])) is not None:
                params[key] = cast(value)
        if output_kind is not None:
            params["output_kind"] = output_kind
        return api.SamplingParams(**params), lora_name
    except Exception as exc:  # noqa: BLE001  (any failure: the caller says it its way)
        raise SamplingParamsError(str(exc)) from exc


def decode_image(encoded: str | bytes):
    """One element of the vLLM backend's `image` input: the base64 of an image file (decoded
    without validation, as `base64.b64decode` does by default), opened with Pillow, in RGB."""
    from PIL import Image  # noqa: PLC0415  (only for requests with images)

    return Image.open(io.BytesIO(base64.b64decode(encoded))).convert("RGB")


async def render_prompt(engine, text: str, images: list | None = None):
    """The engine's input for a text prompt (and its images): rendered by the engine's own
    renderer (tokenized as vLLM tokenizes, special tokens added) where vLLM has one."""
    prompt: dict[str, Any] = {"prompt": text}
    if images:
        prompt["multi_modal_data"] = {"image": images}
    return await render_input(engine, prompt)


async def render_input(engine, prompt):
    """The engine's input for a prompt as vLLM takes one (`{"prompt": text}`, `{"prompt_token_ids":
    ids}`, ...): rendered by the engine's own renderer where vLLM has one, else as it is."""
    parse = vllm_api().parse_model_prompt
    if parse is None:
        return prompt
    (engine_input,) = await engine.renderer.render_cmpl_async([parse(engine.model_config, prompt)])
    return engine_input


# ---- the engine ------------------------------------------------------------------------------------


async def create_engine(args: dict[str, Any]):
    """An `AsyncLLM` from engine arguments. A coroutine so that it runs on the event loop that will
    read the engine's outputs: AsyncLLM starts its output handler on the loop it is made on."""
    api = vllm_api()
    return api.AsyncLLM.from_engine_args(api.AsyncEngineArgs(**args))


def shutdown_engine(engine, timeout: float | None = None) -> None:
    """Stops the engine's processes (engine core, workers) and closes its sockets."""
    engine.shutdown(timeout=timeout) if _takes_timeout(engine.shutdown) else engine.shutdown()


def _takes_timeout(method) -> bool:
    import inspect  # noqa: PLC0415

    try:
        return "timeout" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def engine_exit_codes(engine) -> list[int | None]:
    """The exit codes of the engine's core processes (None: still running), or [] where the
    installed vLLM does not say. 0 is an engine core that shut down as asked (a SIGINT or SIGTERM:
    Ctrl-C reaches every process of the terminal's group); a crash or a kill is not 0."""
    try:
        return [process.exitcode for process in engine.engine_core.resources.engine_manager.processes]
    except (AttributeError, TypeError):
        return []


def is_engine_dead(exc: BaseException) -> bool:
    """Whether `exc` says the engine is gone for good (vLLM's EngineDeadError)."""
    return type(exc).__name__ == "EngineDeadError"


def is_refusal(exc: BaseException) -> bool:
    """Whether vLLM refused the request itself (its client errors: a prompt or value it does not
    take), rather than failing to serve it."""
    return any(cls.__name__ in ("VLLMClientError", "VLLMValidationError") for cls in type(exc).__mro__)
