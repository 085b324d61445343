"""A local stand-in for the `vllm` Python-based backend of NVIDIA's Triton containers.

NVIDIA's `-vllm-python-py3` Triton images ship a Python-based backend named `vllm`
(triton-inference-server/vllm_backend) that serves any model whose `config.pbtxt` says
`backend: "vllm"` and whose version directory holds `model.json` (keyword arguments of
vLLM's `AsyncEngineArgs`). Those images are not available here, so this file provides a
backend with the same name and the same tensor interface (release r25.11+/main), running
on vLLM's V1 `AsyncLLM`. The same model directory loads unchanged, and a caller (HTTP
`generate`, gRPC streaming or a BLS model) sees the same tensors, flags and errors.

Interface (everything is added by `auto_complete_config`, so a config.pbtxt with just
`backend: "vllm"` is enough; decoupled, max_batch_size 0):

  inputs   text_input STRING [1]; optional: image STRING [-1] (each element the base64 of an
           image file, decoded with Pillow and converted to RGB, passed to vLLM as the prompt's
           `multi_modal_data` images), stream BOOL [1], sampling_parameters
           STRING [1] (JSON; falls back to the request parameters), exclude_input_in_output
           BOOL [1], return_finish_reason / return_cumulative_logprob / return_logprobs /
           return_num_input_tokens / return_num_output_tokens BOOL [1]
  outputs  text_output STRING [-1], finish_reason STRING [-1], cumulative_logprob FP32 [-1],
           logprobs STRING [-1], num_input_tokens UINT32 [1] (sent as a 0-d array),
           num_output_tokens UINT32 [-1]

Streaming sends one response per engine output with *delta* text, delta logprobs and
delta token counts; the FINAL flag rides on the last data response. Non-streaming sends
exactly one response (prompt + completion unless `exclude_input_in_output` is true).

Errors end the request with one response: `text_output=["N/A"]` and
`TritonError("Error generating stream: <exception>")` (INTERNAL); LoRA problems answer with
their message in both. Sampling parameters that vLLM refuses to build `SamplingParams` from
answer, as on the real backend, "Error generating stream: 'NoneType' object has no attribute
'lora_name'" (the cause goes to the log; see `build_sampling_params`). A cancelled stream
ends with a CANCELLED error response; every cancellation also aborts the request in the engine.

Differences from the real backend:
- Not provided: embeddings (the `embedding_request`
  input is declared, as from 25.11, but a request using it fails) and the `GPU_DEVICE_IDS`
  parameter; of the
  `REPORT_CUSTOM_METRICS` metrics bridge only the `vllm:num_requests_running` gauge (labels
  `model`, `version`), kept by this backend's own count of running requests.
  `ENABLE_VLLM_HEALTH_CHECK` is implemented.
- Error responses go through the response thread (the real backend sends them from the event
  loop, where they can overtake a stream's queued responses); the order per request is kept.
  Non-streaming answers, and their cancellation checks after every engine output, happen on the
  event loop, as in the real backend.

Process-level details that make vLLM work inside a Python backend stub (UTF-8 locale,
`spawn` for the engine processes, a lazy vLLM import, GC freezing) are explained where
they are done.
"""

import locale
import multiprocessing
import os
import shutil
import sys


def _use_utf8_locale() -> None:
    """Switch the process locale to UTF-8.

    The Python backend stub embeds an interpreter that starts with the ASCII "C" locale and
    ignores PYTHONUTF8, so `open()` defaults to ASCII and torch/vLLM/transformers fail on
    UTF-8 files (`UnicodeDecodeError: 'ascii' codec`). Setting the C locale makes the
    preferred encoding UTF-8. This must run before vLLM or torch is imported.
    """
    for name in ("C.UTF-8", "C.utf8", "en_US.UTF-8"):
        try:
            locale.setlocale(locale.LC_ALL, name)
            return
        except locale.Error:
            continue


def _python_executable() -> str | None:
    """A real Python interpreter for `multiprocessing` to spawn.

    In the stub `sys.executable` is resolved from the `python3` first on PATH (the venv's);
    if an embedding ever reports the stub binary or nothing instead, spawning would run the
    wrong program, so fall back to the interpreter of this prefix.
    """
    candidates = [
        sys.executable,
        os.path.join(sys.exec_prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}"),
        os.path.join(sys.exec_prefix, "bin", "python3"),
        shutil.which("python3"),
    ]
    for path in candidates:
        if path and os.path.basename(path).startswith("python") and os.access(path, os.X_OK):
            return path
    return None


def _prepare_engine_subprocesses() -> None:
    """Make vLLM's engine-core and worker subprocesses start correctly from a stub.

    - Start method: vLLM's default is `fork` (its CPU platform switches to `spawn` on its
      own). Forking the stub would copy a multi-threaded process that holds shared-memory
      IPC with tritonserver, so always use `spawn`.
    - Executable: `spawn` runs `sys.executable`; make sure it is a Python interpreter.
    - Main module: the stub's `__main__` is a built-in module without `__file__`, so a
      spawned child has no main script to re-import; no `if __name__ == "__main__"` guard is
      needed (unlike a script that starts the engine at import time).
    - argv: the stub sets `sys.argv == ['']`; spawn copies it to the children. Keep it a list.
    - Children are ordinary interpreters, so PYTHONUTF8 works for them.
    """
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    os.environ.setdefault("PYTHONUTF8", "1")
    executable = _python_executable()
    if executable:
        if executable != sys.executable:
            sys.executable = executable
        multiprocessing.set_executable(executable)
    if not isinstance(getattr(sys, "argv", None), list) or not sys.argv:
        sys.argv = [""]


_use_utf8_locale()
_prepare_engine_subprocesses()

# ruff: noqa: E402  (the environment above must be set before these imports)
import asyncio
import base64
import dataclasses
import io
import gc
import json
import queue
import threading
import traceback
import uuid
from typing import Any, Optional

import numpy as np
import triton_python_backend_utils as pb_utils

# vLLM names, bound by `import_vllm()`. vLLM is not imported at module import time: Triton
# also loads this file in a short-lived stub only to run `auto_complete_config`, and
# importing vLLM there would add about 10 s to every model load.
AsyncEngineArgs = AsyncLLM = LoRARequest = SamplingParams = StructuredOutputsParams = None
parse_model_prompt = None


def import_vllm() -> None:
    global AsyncEngineArgs, AsyncLLM, LoRARequest, SamplingParams, StructuredOutputsParams, parse_model_prompt
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.engine.async_llm import AsyncLLM

    try:  # vLLM >= 0.12: prompts are rendered by the engine's renderer before `generate`
        from vllm.renderers.inputs.preprocess import parse_model_prompt
    except ImportError:  # older vLLM: `generate` takes the prompt dict itself
        parse_model_prompt = None


ENGINE_ARGS_FILENAME = "model.json"
MULTI_LORA_FILENAME = "multi_lora.json"
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

INPUTS = [
    {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
    # Base64 image files for multimodal models, one per element (from 25.01).
    {"name": "image", "data_type": "TYPE_STRING", "dims": [-1], "optional": True},
    {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    {"name": "exclude_input_in_output", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_finish_reason", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_cumulative_logprob", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_logprobs", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_num_input_tokens", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    {"name": "return_num_output_tokens", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    # Declared as from 25.11 (reserved for Triton's OpenAI frontend); embeddings are not served here.
    {"name": "embedding_request", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
]
OUTPUTS = [
    {"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "finish_reason", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "cumulative_logprob", "data_type": "TYPE_FP32", "dims": [-1]},
    {"name": "logprobs", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "num_input_tokens", "data_type": "TYPE_UINT32", "dims": [1]},
    {"name": "num_output_tokens", "data_type": "TYPE_UINT32", "dims": [-1]},
]
RETURN_FLAGS = (
    "return_finish_reason",
    "return_cumulative_logprob",
    "return_logprobs",
    "return_num_input_tokens",
    "return_num_output_tokens",
)

# SamplingParams fields whose annotation is exactly one of these are cast with the
# constructor, so JSON strings such as "0.1" or "100" are accepted (note: bool("false") is
# True, as in the real backend). Other fields are passed through unchanged.
_CASTS = ((int, int), (float, float), (bool, bool), (str, str), (Optional[int], int))


def _cast_for(annotation):
    # Compared with == (not a dict lookup): some annotations are not hashable.
    return next((cast for kind, cast in _CASTS if annotation == kind), None)


# --------------------------------------------------------------------------------------
# Request parsing
# --------------------------------------------------------------------------------------


def sampling_parameters_text(request) -> str:
    """The sampling-parameters JSON: the `sampling_parameters` tensor, else the request parameters."""
    tensor = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
    if tensor is not None:
        return tensor.as_numpy()[0].decode("utf-8")
    return request.parameters()


# What the real backend answers for every sampling-parameters JSON vLLM refuses to build
# `SamplingParams` from: `TritonSamplingParams.from_dict` logs the exception and returns None,
# and the next line reads `lora_name` from that None.
NO_SAMPLING_PARAMS = "'NoneType' object has no attribute 'lora_name'"


def build_sampling_params(params_json: str, logger) -> tuple["SamplingParams", str | None]:
    """Turn the sampling-parameters JSON into vLLM `SamplingParams` and an optional LoRA name.

    As in the real backend, whatever fails here (malformed JSON, unknown keys, values a cast
    or `SamplingParams` refuses, bad structured-output specs) is logged with its cause
    ("Was trying to create `TritonSamplingParams`, but got exception: ...") and then raises
    `AttributeError("'NoneType' object has no attribute 'lora_name'")`, so the client's
    message is always "Error generating stream: 'NoneType' object has no attribute
    'lora_name'". Values vLLM refuses only in the engine (a token id outside the vocabulary,
    more log probabilities than `max_logprobs`) fail later, in `generate`, with their cause.
    """
    try:
        params: dict[str, Any] = json.loads(params_json)
        lora_name = params.pop("lora_name", None)
        annotations = SamplingParams.__annotations__
        for key, value in params.items():
            if key == "structured_outputs":
                # The value is itself a JSON string, e.g. "{\"json\": {...schema...}}".
                params[key] = StructuredOutputsParams(**json.loads(value))
            elif key in annotations and (cast := _cast_for(annotations[key])) is not None:
                params[key] = cast(value)
        return SamplingParams(**params), lora_name
    except Exception as exc:  # noqa: BLE001  (any failure, as the real backend catches it)
        logger.log_error(f"[vllm] Was trying to create `TritonSamplingParams`, but got exception: {exc}")
    raise AttributeError(NO_SAMPLING_PARAMS)


def _optional_bool(request, name: str) -> bool | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else bool(tensor.as_numpy()[0])


def decode_images(request) -> list:
    """The `image` input as the real backend reads it: each element base64 (decoded without
    validation, as `base64.b64decode` does by default), opened with Pillow, converted to RGB."""
    tensor = pb_utils.get_input_tensor_by_name(request, "image")
    if tensor is None:
        return []
    from PIL import Image  # noqa: PLC0415  (only for requests with images)

    images = []
    for element in tensor.as_numpy().reshape(-1):
        text = element.decode("utf-8") if isinstance(element, bytes) else str(element)
        images.append(Image.open(io.BytesIO(base64.b64decode(text))).convert("RGB"))
    return images


@dataclasses.dataclass
class GenerateInputs:
    prompt: str
    stream: bool
    prepend_input: bool
    sampling_json: str
    returns: dict[str, bool]
    images: list = dataclasses.field(default_factory=list)


def parse_generate_inputs(request) -> GenerateInputs:
    prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0]
    if isinstance(prompt, bytes):
        prompt = prompt.decode("utf-8")

    if pb_utils.get_input_tensor_by_name(request, "embedding_request") is not None:
        raise ValueError("Embedding requests are not supported by this backend.")
    images = decode_images(request)
    stream = bool(_optional_bool(request, "stream"))

    # exclude_input_in_output: present -> its negation; absent -> stream ? False : True.
    exclude = _optional_bool(request, "exclude_input_in_output")
    prepend_input = (not exclude) if exclude is not None else not stream
    if prepend_input and stream:
        raise ValueError("When streaming, `exclude_input_in_output` = False is not allowed.")

    returns = {name: bool(_optional_bool(request, name)) for name in RETURN_FLAGS}
    return GenerateInputs(prompt, stream, prepend_input, sampling_parameters_text(request), returns, images)


# --------------------------------------------------------------------------------------
# Response building
# --------------------------------------------------------------------------------------


def _logprobs_json(logprobs, start: int) -> bytes:
    """JSON list, one dict per position from `start`: {"<token_id>": {logprob, rank, decoded_token}}."""
    positions = []
    for index in range(start, len(logprobs)):
        position = logprobs[index] or {}
        positions.append(
            {
                str(token_id): {
                    "logprob": entry.logprob,
                    "rank": entry.rank,
                    "decoded_token": entry.decoded_token,
                }
                for token_id, entry in position.items()
            }
        )
    return json.dumps(positions).encode("utf-8")


class ResponseBuilder:
    """Builds Triton responses from cumulative vLLM `RequestOutput`s of one request.

    vLLM runs with `RequestOutputKind.CUMULATIVE`; for streaming, this remembers how much of
    each sequence was already sent and emits only the new part (text, logprobs, token count).
    """

    def __init__(self, returns: dict[str, bool], text_dtype):
        self.returns = returns
        self.text_dtype = text_dtype
        self.sent_text: list[int] | None = None
        self.sent_logprobs: list[int] | None = None
        self.sent_tokens: list[int] | None = None

    def build(self, request_output, prepend_prompt: bool):
        outputs = request_output.outputs
        count = len(outputs)
        tensors = []

        if self.sent_text is None:
            self.sent_text = [0] * count
        prefix = (request_output.prompt or "") if prepend_prompt else ""
        texts = [(prefix + out.text[sent:]).encode("utf-8") for out, sent in zip(outputs, self.sent_text)]
        self.sent_text = [len(out.text) for out in outputs]
        tensors.append(pb_utils.Tensor("text_output", np.asarray(texts, dtype=self.text_dtype)))

        if self.returns["return_finish_reason"]:
            reasons = [str(out.finish_reason) for out in outputs]
            tensors.append(pb_utils.Tensor("finish_reason", np.asarray(reasons, dtype=np.object_)))

        if self.returns["return_cumulative_logprob"]:
            cumulative = [out.cumulative_logprob for out in outputs]  # None -> NaN
            tensors.append(pb_utils.Tensor("cumulative_logprob", np.asarray(cumulative, dtype=np.float32)))

        if self.returns["return_logprobs"]:
            if self.sent_logprobs is None:
                self.sent_logprobs = [0] * count
            encoded = []
            for i, out in enumerate(outputs):
                if out.logprobs is None:
                    encoded.append(b"null")
                    continue
                encoded.append(_logprobs_json(out.logprobs, self.sent_logprobs[i]))
                self.sent_logprobs[i] = len(out.logprobs)
            tensors.append(pb_utils.Tensor("logprobs", np.asarray(encoded, dtype=np.object_)))

        if self.returns["return_num_input_tokens"]:
            # A 0-d array, exactly like the real backend (config dims say [1]).
            prompt_tokens = len(request_output.prompt_token_ids or [])
            tensors.append(pb_utils.Tensor("num_input_tokens", np.asarray(prompt_tokens, dtype=np.uint32)))

        if self.returns["return_num_output_tokens"]:
            if self.sent_tokens is None:
                self.sent_tokens = [0] * count
            new_tokens = [len(out.token_ids) - sent for out, sent in zip(outputs, self.sent_tokens)]
            self.sent_tokens = [len(out.token_ids) for out in outputs]
            tensors.append(pb_utils.Tensor("num_output_tokens", np.asarray(new_tokens, dtype=np.uint32)))

        return pb_utils.InferenceResponse(output_tensors=tensors)


def _freeze_gc_heap() -> None:
    """Collect, then move every surviving object out of the garbage collector's view."""
    gc.collect()
    gc.freeze()


@dataclasses.dataclass
class SenderState:
    """One request's response sender, shared by its asyncio task and the response thread."""

    sender: Any
    cancelled: bool = False  # written by the response thread after each non-final send
    final_queued: bool = False  # written by the asyncio task


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------


class TritonPythonModel:
    @classmethod
    def auto_complete_config(cls, auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        present_inputs = {tensor["name"] for tensor in config.get("input", [])}
        present_outputs = {tensor["name"] for tensor in config.get("output", [])}
        for tensor in INPUTS:
            if tensor["name"] not in present_inputs:
                auto_complete_model_config.add_input(tensor)
        for tensor in OUTPUTS:
            if tensor["name"] not in present_outputs:
                auto_complete_model_config.add_output(tensor)
        # Requests are handed to vLLM asynchronously, so responses are decoupled; vLLM
        # batches on its own, so Triton does not.
        auto_complete_model_config.set_model_transaction_policy(dict(decoupled=True))
        auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    # ---- lifecycle -----------------------------------------------------------------

    def initialize(self, args):
        import_vllm()
        self.args = args
        self.logger = pb_utils.Logger
        self.model_config = json.loads(args["model_config"])
        text_config = pb_utils.get_output_config_by_name(self.model_config, "text_output")
        self.text_dtype = pb_utils.triton_string_to_numpy(text_config["data_type"])

        assert pb_utils.using_decoupled_model_transaction_policy(
            self.model_config
        ), "vLLM Triton backend must be configured to use decoupled model transaction policy"

        self.version_dir = os.path.join(args["model_repository"], args["model_version"])
        engine_config = self._read_engine_config()
        self._apply_device_config(engine_config)
        self._setup_lora(engine_config)
        engine_args = AsyncEngineArgs(**engine_config)

        self.health_check_enabled = self._bool_config_parameter("ENABLE_VLLM_HEALTH_CHECK")
        self.healthy = True
        self.running_metric = None
        if self._bool_config_parameter("REPORT_CUSTOM_METRICS"):
            # Updated only on the engine's event loop: metric updates from several threads at
            # once crash Triton 2.51's Python backend.
            self.metric_family = pb_utils.MetricFamily(
                "vllm:num_requests_running", "Number of requests currently running on GPU.",
                pb_utils.MetricFamily.GAUGE)
            self.running_metric = self.metric_family.Metric(
                labels={"model": args["model_name"], "version": args["model_version"]})

        self.shutting_down = False
        self.tasks: set[asyncio.Task] = set()

        self._start_event_loop()
        try:
            self.engine = self._run_on_loop(self._create_engine(engine_args))
            self.supported_tasks = self._run_on_loop(self.engine.get_supported_tasks())
        except BaseException:
            self.logger.log_error(f"[vllm] Failed to start engine: {traceback.format_exc()}")
            self._stop_event_loop()
            raise

        # Sending is a blocking IPC call; a dedicated thread does it so the engine's event
        # loop keeps running while responses go out.
        self.responses: queue.Queue = queue.Queue()
        self.response_thread = threading.Thread(target=self._response_loop, name="vllm-responses", daemon=True)
        self.response_thread.start()
        # Like vLLM's own API server: keep the startup heap out of later GC passes.
        _freeze_gc_heap()
        self.logger.log_info("[vllm] Engine started")

    def finalize(self):
        self.logger.log_info("[vllm] Issuing finalize to vllm backend")
        self.shutting_down = True
        try:
            self._run_on_loop(self._shutdown_engine(), timeout=120)
        except Exception:
            self.logger.log_error(f"[vllm] Engine shutdown failed: {traceback.format_exc()}")
        self._stop_event_loop()
        # Everything still queued is sent before the sentinel is reached.
        self.responses.put(None)
        self.response_thread.join(timeout=30)
        self.engine = None
        # The stub process exits right after this. Freezing what is left keeps the
        # interpreter's teardown from running full garbage-collector passes over the
        # torch/vLLM object graph (~3 s of every unload here). Side effect: nanobind may
        # print "leaked instances" notes for objects that are then never collected.
        _freeze_gc_heap()
        self.logger.log_info("[vllm] Shutdown complete")

    def _read_engine_config(self) -> dict:
        path = os.path.join(self.version_dir, ENGINE_ARGS_FILENAME)
        assert os.path.isfile(
            path
        ), f"'{ENGINE_ARGS_FILENAME}' containing vllm engine args must be provided in '{self.version_dir}'"
        with open(path, encoding="utf-8") as file:
            return json.load(file)

    def _apply_device_config(self, engine_config: dict) -> None:
        if self.args.get("model_instance_kind") != "GPU":
            return
        world_size = int(engine_config.get("tensor_parallel_size", 1)) * int(
            engine_config.get("pipeline_parallel_size", 1)
        )
        if world_size > 1:
            raise ValueError(
                "KIND_GPU is currently for single-GPU models, please specify KIND_MODEL "
                "in the model's config.pbtxt for multi-GPU models"
            )
        device_id = int(self.args["model_instance_device_id"])
        if device_id >= 0:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(device_id)

    def _setup_lora(self, engine_config: dict) -> None:
        self.lora_enabled = str(engine_config.get("enable_lora", False)).lower() == "true"
        self.lora_paths: dict[str, str] = {}
        self.lora_names: list[str] = []
        if not self.lora_enabled:
            return
        path = os.path.join(self.version_dir, MULTI_LORA_FILENAME)
        try:
            with open(path, encoding="utf-8") as file:
                self.lora_paths = json.load(file)
        except FileNotFoundError:
            raise FileNotFoundError(f"Triton backend cannot find {path}.") from None
        self.lora_names = list(self.lora_paths)

    def _bool_config_parameter(self, name: str) -> bool:
        parameter = self.model_config.get("parameters", {}).get(name)
        return bool(parameter) and parameter.get("string_value", "").lower() == "true"

    # ---- event loop and engine -----------------------------------------------------

    def _start_event_loop(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=self._run_event_loop, name="vllm-engine-loop", daemon=True)
        self.loop_thread.start()

    def _run_event_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def _run_on_loop(self, coroutine, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def _stop_event_loop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.loop_thread.join(timeout=30)

    async def _create_engine(self, engine_args: "AsyncEngineArgs") -> "AsyncLLM":
        # Created on the loop so that AsyncLLM starts its output handler on this loop.
        return AsyncLLM.from_engine_args(engine_args)

    async def _shutdown_engine(self, drain_seconds: float = 10.0) -> None:
        # Triton drains in-flight requests before unloading, so this is normally empty.
        if self.tasks:
            self.logger.log_info(f"[vllm] Awaiting remaining {len(self.tasks)} requests")
            await asyncio.wait(set(self.tasks), timeout=drain_seconds)
        for task in set(self.tasks):
            task.cancel()  # each task answers its request and aborts it in the engine
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=5)
        self.engine.shutdown()

    async def _render_prompt(self, text: str, images: list):
        prompt = {"prompt": text}
        if images:
            prompt["multi_modal_data"] = {"image": images}
        if parse_model_prompt is None:
            return prompt
        parsed = parse_model_prompt(self.engine.model_config, prompt)
        (engine_input,) = await self.engine.renderer.render_cmpl_async([parsed])
        return engine_input

    # ---- request handling ----------------------------------------------------------

    def execute(self, requests):
        if self.health_check_enabled and not self._engine_is_healthy(requests):
            return None
        for request in requests:
            if self._reject_unsupported_lora(request):
                continue
            assert not self.shutting_down, "Cannot create tasks after shutdown has been requested"
            asyncio.run_coroutine_threadsafe(self._generate(request), self.loop)
        return None

    def _reject_unsupported_lora(self, request) -> bool:
        """Answer requests naming an unusable LoRA at once, like the real backend.

        As there, the JSON is parsed here in `execute`, so malformed JSON fails the whole
        `execute` call (Triton then answers with "Failed to process the request(s)...").
        """
        lora_name = json.loads(sampling_parameters_text(request)).pop("lora_name", None)
        if lora_name is None:
            return False
        if not self.lora_enabled:
            message = "LoRA feature is not enabled."
            self.logger.log_info("[vllm] LoRA is not enabled, please restart the backend with LoRA enabled.")
        elif lora_name not in self.lora_names:
            message = f"LoRA {lora_name} is not supported, we currently support {self.lora_names}"
            self.logger.log_info(f"[vllm] LoRA {lora_name} not found.")
        else:
            return False
        text = pb_utils.Tensor("text_output", np.asarray([message], dtype=self.text_dtype))
        response = pb_utils.InferenceResponse(output_tensors=[text], error=pb_utils.TritonError(message))
        request.get_response_sender().send(response, flags=FINAL)
        return True

    def _lora_request(self, lora_name: str | None) -> "LoRARequest | None":
        if lora_name is None:
            return None
        lora_id = self.lora_names.index(lora_name) + 1
        return LoRARequest(str(lora_id), lora_id, self.lora_paths[lora_name])

    def _engine_is_healthy(self, requests) -> bool:
        if self.healthy:
            try:
                self._run_on_loop(self.engine.check_health())
            except Exception:
                self.logger.log_error(
                    f"[vllm] Engine is not healthy and model will be unloaded: {traceback.format_exc()}"
                )
                pb_utils.unload_model(self.model_config["name"])  # non-blocking
                self.healthy = False
        if not self.healthy:
            error = pb_utils.TritonError(
                "Model is unavailable due to unhealthy vLLM engine", pb_utils.TritonError.UNAVAILABLE
            )
            for request in requests:
                request.get_response_sender().send(pb_utils.InferenceResponse(error=error), flags=FINAL)
        return self.healthy

    async def _generate(self, request) -> None:
        """Run one request on the engine and queue its responses (runs on the engine loop)."""
        task = asyncio.current_task()
        self.tasks.add(task)
        self._report_running()
        state = SenderState(request.get_response_sender())
        try:
            await self._generate_responses(request, state)
        except asyncio.CancelledError:  # engine shutdown with the request still running
            self._queue_final(state, self._error_response("Error generating stream: engine is shutting down"))
            raise
        except Exception as exc:
            self.logger.log_error(f"[vllm] Error generating stream: {traceback.format_exc()}")
            self._queue_final(state, self._error_response(f"Error generating stream: {exc}"))
        finally:
            self.tasks.discard(task)
            self._report_running()

    def _report_running(self) -> None:
        if self.running_metric is not None:
            self.running_metric.set(len(self.tasks))

    async def _generate_responses(self, request, state: SenderState) -> None:
        if "generate" not in self.supported_tasks:
            raise ValueError(f"Model {self.args['model_name']} does not support 'generate' request")
        inputs = parse_generate_inputs(request)
        # A refused value logs its cause and fails the request as the real backend's does.
        sampling_params, lora_name = build_sampling_params(inputs.sampling_json, self.logger)
        lora_request = self._lora_request(lora_name)
        prompt = await self._render_prompt(inputs.prompt, inputs.images)

        request_id = uuid.uuid4().hex
        builder = ResponseBuilder(inputs.returns, self.text_dtype)
        outputs = self.engine.generate(prompt, sampling_params, request_id, lora_request=lora_request)
        last_output = None
        try:
            async for request_output in outputs:
                last_output = request_output
                if await self._is_cancelled(state, inputs.stream):
                    self.logger.log_info("[vllm] Cancelling the request")
                    await self.engine.abort(request_id)
                    self.logger.log_info("[vllm] Successfully cancelled the request")
                    if inputs.stream:
                        cancelled = pb_utils.TritonError("Request was cancelled", pb_utils.TritonError.CANCELLED)
                        self._queue_final(state, pb_utils.InferenceResponse(error=cancelled))
                    break
                if inputs.stream:
                    response = builder.build(request_output, prepend_prompt=False)
                    if request_output.finished:
                        self._queue_final(state, response)
                    else:
                        self.responses.put((state, response, 0))
        finally:
            await outputs.aclose()

        if not inputs.stream and last_output is not None:
            # One response with everything; after a cancellation this is the partial output
            # (the client sees the cancellation from Triton itself). Sent from the event loop
            # itself, as the real backend does.
            state.final_queued = True
            state.sender.send(builder.build(last_output, prepend_prompt=inputs.prepend_input), FINAL)
        if not state.final_queued:  # the engine ended the stream without a finished output
            self._queue_final(state, None)

    async def _is_cancelled(self, state: SenderState, stream: bool) -> bool:
        if stream:
            return state.cancelled  # refreshed by the response thread after every send
        # As the real backend: a blocking IPC round trip on the event loop, after every engine
        # output of a non-streaming request (it holds up the loop, and so every request of it).
        return state.sender.is_cancelled()

    def _error_response(self, message: str):
        text = pb_utils.Tensor("text_output", np.asarray(["N/A"], dtype=self.text_dtype))
        return pb_utils.InferenceResponse(output_tensors=[text], error=pb_utils.TritonError(message))

    def _queue_final(self, state: SenderState, response) -> None:
        if state.final_queued:
            return
        state.final_queued = True
        self.responses.put((state, response, FINAL))

    def _response_loop(self) -> None:
        while True:
            item = self.responses.get()
            if item is None:
                return
            state, response, flags = item
            try:
                state.sender.send(response, flags)
                if flags != FINAL:
                    # Never ask after FINAL: the sender is closed then.
                    state.cancelled = state.sender.is_cancelled()
            except Exception:
                self.logger.log_error(f"[vllm] An error occurred while sending a response: {traceback.format_exc()}")
