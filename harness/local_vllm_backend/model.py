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
           return_num_input_tokens / return_num_output_tokens BOOL [1], embedding_request STRING
           [1] (JSON `{"input": text or token ids, "pooling_params": {"dimensions": [N]}}`; its
           presence makes the request an `embed` one)
  outputs  text_output STRING [-1], finish_reason STRING [-1], cumulative_logprob FP32 [-1],
           logprobs STRING [-1], num_input_tokens UINT32 [1] (sent as a 0-d array),
           num_output_tokens UINT32 [-1]

Streaming sends one response per engine output with *delta* text, delta logprobs and
delta token counts; the FINAL flag rides on the last data response. Non-streaming sends
exactly one response (prompt + completion unless `exclude_input_in_output` is true).
An embedding request gets exactly one response: `text_output` [1] the vector as a JSON list of
floats, `num_input_tokens` the prompt's length and `num_output_tokens` 0 (both 0-d, when asked
for). A request whose task (`generate`, or `embed` for one with `embedding_request`) the engine
does not have fails with "Error generating stream: Model <name> does not support '<task>' request".

Errors end the request with one response: `text_output=["N/A"]` and
`TritonError("Error generating stream: <exception>")` (INTERNAL); LoRA problems answer with
their message in both. Sampling parameters that vLLM refuses to build `SamplingParams` from
answer, as on the real backend, "Error generating stream: 'NoneType' object has no attribute
'lora_name'" (the cause goes to the log; see `build_sampling_params`). A cancelled stream
ends with a CANCELLED error response; every cancellation also aborts the request in the engine.

Differences from the real backend:
- Not provided: the `GPU_DEVICE_IDS` parameter; of the
  `REPORT_CUSTOM_METRICS` metrics bridge only the `vllm:num_requests_running` gauge (labels
  `model`, `version`), kept by this backend's own count of running requests.
  `ENABLE_VLLM_HEALTH_CHECK` is implemented.
- Error responses go through the response thread (the real backend sends them from the event
  loop, where they can overtake a stream's queued responses); the order per request is kept.
  Non-streaming answers, and their cancellation checks after every engine output, happen on the
  event loop, as in the real backend.

The engine itself runs on `tritonchat.engine`, the driver the chat models' in-process engine
(`engine: inprocess`) shares: engine arguments and LoRA adapters read from the version
directory, SamplingParams built from the JSON, the engine made and shut down, cumulative outputs
turned into deltas, and the process-level details that make vLLM work inside a Python backend
stub (UTF-8 locale, `spawn` for the engine processes, a lazy vLLM import, GC freezing), each
explained there. What stays here is Triton's interface: tensors in and out, responses, flags,
errors and cancellation as NVIDIA's backend has them.
"""

from tritonchat.engine.process import freeze_gc, prepare_process

# The UTF-8 locale, `spawn` for the engine's processes, a real Python to spawn (explained in
# tritonchat/engine/process.py): before vLLM or torch is imported.
prepare_process()

# ruff: noqa: E402  (the environment above must be set before these imports)
import asyncio
import dataclasses
import json
import os
import queue
import threading
import traceback
import uuid
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

# The engine itself (configuration, SamplingParams, creation and shutdown, outputs -> deltas) is
# the driver the chat models' in-process engine shares. It imports vLLM only when an engine is
# made: Triton also loads this file in a short-lived stub only to run `auto_complete_config`,
# and importing vLLM there would add about 10 s to every model load.
from tritonchat.engine.driver import (
    EngineConfig,
    SamplingParamsError,
    build_sampling_params as build_engine_sampling_params,
    create_engine,
    decode_image,
    device_environment,
    render_input,
    render_prompt,
    shutdown_engine,
    vllm_api,
)
from tritonchat.engine.outputs import DeltaTracker, logprobs_json

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
    # From 25.11 (reserved for Triton's OpenAI frontend): an embedding request (see `parse_embed_inputs`).
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


def build_sampling_params(params_json: str, logger) -> tuple[Any, str | None]:
    """Turn the sampling-parameters JSON into vLLM `SamplingParams` and an optional LoRA name.

    As in the real backend, whatever fails here (malformed JSON, unknown keys, values a cast
    or `SamplingParams` refuses, bad structured-output specs) is logged with its cause
    ("Was trying to create `TritonSamplingParams`, but got exception: ...") and then raises
    `AttributeError("'NoneType' object has no attribute 'lora_name'")`, so the client's
    message is always "Error generating stream: 'NoneType' object has no attribute
    'lora_name'". Values vLLM refuses only in the engine (a token id outside the vocabulary,
    more log probabilities than `max_logprobs`) fail later, in `generate`, with their cause.
    (The release this stands in for knows only the `structured_outputs` key.)
    """
    try:
        return build_engine_sampling_params(params_json, constraint_keys=("structured_outputs",))
    except SamplingParamsError as exc:
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
    return [decode_image(element.decode("utf-8") if isinstance(element, bytes) else str(element))
            for element in tensor.as_numpy().reshape(-1)]


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

    images = decode_images(request)
    stream = bool(_optional_bool(request, "stream"))

    # exclude_input_in_output: present -> its negation; absent -> stream ? False : True.
    exclude = _optional_bool(request, "exclude_input_in_output")
    prepend_input = (not exclude) if exclude is not None else not stream
    if prepend_input and stream:
        raise ValueError("When streaming, `exclude_input_in_output` = False is not allowed.")

    returns = {name: bool(_optional_bool(request, name)) for name in RETURN_FLAGS}
    return GenerateInputs(prompt, stream, prepend_input, sampling_parameters_text(request), returns, images)


def request_task(request) -> str:
    """The engine task a request asks for: `embed` when it has the `embedding_request` input."""
    return "generate" if pb_utils.get_input_tensor_by_name(request, "embedding_request") is None else "embed"


@dataclasses.dataclass
class EmbedInputs:
    prompt: Any
    dimensions: int | None
    returns: dict[str, bool]


def parse_embed_inputs(request) -> EmbedInputs:
    """The `embedding_request` input as the real backend reads it: JSON whose `input` is a text
    (the prompt) or a non-empty list whose first element is an int (token ids); anything else
    goes to the renderer as it is. Of `pooling_params` only `dimensions` is read, its first
    element (Triton's OpenAI frontend sends `[N]`)."""
    data = json.loads(pb_utils.get_input_tensor_by_name(request, "embedding_request").as_numpy()[0].decode("utf-8"))
    prompt = data["input"]
    if isinstance(prompt, str):
        prompt = {"prompt": prompt}
    elif isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        prompt = {"prompt_token_ids": prompt}
    pooling = data.get("pooling_params", {})
    dimensions = pooling["dimensions"][0] if "dimensions" in pooling else None
    returns = {name: bool(_optional_bool(request, name))
               for name in ("return_num_input_tokens", "return_num_output_tokens")}
    return EmbedInputs(prompt, dimensions, returns)


def embedding_response(request_output, returns: dict[str, bool], text_dtype):
    """The real backend's one response to an embedding request: `text_output` the vector as a
    JSON list, `num_input_tokens` the prompt's length and `num_output_tokens` 0 (both 0-d)."""
    from vllm.outputs import EmbeddingRequestOutput  # noqa: PLC0415  (vLLM is loaded by now)

    embedding = EmbeddingRequestOutput.from_base(request_output).outputs.embedding
    tensors = [pb_utils.Tensor("text_output", np.asarray([json.dumps(embedding)], dtype=text_dtype))]
    if returns["return_num_input_tokens"]:
        prompt_tokens = len(request_output.prompt_token_ids or [])
        tensors.append(pb_utils.Tensor("num_input_tokens", np.asarray(prompt_tokens, dtype=np.uint32)))
    if returns["return_num_output_tokens"]:
        tensors.append(pb_utils.Tensor("num_output_tokens", np.asarray(0, dtype=np.uint32)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


# --------------------------------------------------------------------------------------
# Response building
# --------------------------------------------------------------------------------------


class ResponseBuilder:
    """Builds Triton responses from cumulative vLLM `RequestOutput`s of one request.

    vLLM runs with `RequestOutputKind.CUMULATIVE`; for streaming, the tracker remembers how much
    of each sequence was already sent and only the new part goes out (text, logprobs, token count).
    """

    def __init__(self, returns: dict[str, bool], text_dtype):
        self.returns = returns
        self.text_dtype = text_dtype
        self.sent = DeltaTracker()

    def build(self, request_output, prepend_prompt: bool):
        outputs = request_output.outputs
        tensors = []

        prefix = (request_output.prompt or "") if prepend_prompt else ""
        texts = [(prefix + text).encode("utf-8") for text in self.sent.new_text(outputs)]
        tensors.append(pb_utils.Tensor("text_output", np.asarray(texts, dtype=self.text_dtype)))

        if self.returns["return_finish_reason"]:
            reasons = [str(out.finish_reason) for out in outputs]
            tensors.append(pb_utils.Tensor("finish_reason", np.asarray(reasons, dtype=np.object_)))

        if self.returns["return_cumulative_logprob"]:
            cumulative = [out.cumulative_logprob for out in outputs]  # None -> NaN
            tensors.append(pb_utils.Tensor("cumulative_logprob", np.asarray(cumulative, dtype=np.float32)))

        if self.returns["return_logprobs"]:
            encoded = [b"null" if positions is None else logprobs_json(positions)
                       for positions in self.sent.new_logprobs(outputs)]
            tensors.append(pb_utils.Tensor("logprobs", np.asarray(encoded, dtype=np.object_)))

        if self.returns["return_num_input_tokens"]:
            # A 0-d array, exactly like the real backend (config dims say [1]).
            prompt_tokens = len(request_output.prompt_token_ids or [])
            tensors.append(pb_utils.Tensor("num_input_tokens", np.asarray(prompt_tokens, dtype=np.uint32)))

        if self.returns["return_num_output_tokens"]:
            new_tokens = self.sent.new_token_counts(outputs)
            tensors.append(pb_utils.Tensor("num_output_tokens", np.asarray(new_tokens, dtype=np.uint32)))

        return pb_utils.InferenceResponse(output_tensors=tensors)


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
        self.args = args
        self.logger = pb_utils.Logger
        self.model_config = json.loads(args["model_config"])
        text_config = pb_utils.get_output_config_by_name(self.model_config, "text_output")
        self.text_dtype = pb_utils.triton_string_to_numpy(text_config["data_type"])

        assert pb_utils.using_decoupled_model_transaction_policy(
            self.model_config
        ), "vLLM Triton backend must be configured to use decoupled model transaction policy"

        self.version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.engine_config = EngineConfig.read(self.version_dir)
        device_environment(args.get("model_instance_kind"), args.get("model_instance_device_id"), self.engine_config)
        self.lora_enabled = self.engine_config.lora_enabled
        self.lora_names = self.engine_config.lora_names
        vllm_api()  # vLLM itself, now that the engine will be made

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
            self.engine = self._run_on_loop(create_engine(self.engine_config.args))
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
        freeze_gc()
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
        # Metric families still alive when the stub tears down its shared memory crash the stub
        # (and freezing below would keep any that sit in a reference cycle alive until then).
        self.running_metric = self.metric_family = None
        # The stub process exits right after this: freezing what is left keeps the interpreter's
        # teardown from running full garbage-collector passes over the torch/vLLM object graph.
        freeze_gc()
        self.logger.log_info("[vllm] Shutdown complete")

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

    async def _shutdown_engine(self, drain_seconds: float = 10.0) -> None:
        # Triton drains in-flight requests before unloading, so this is normally empty.
        if self.tasks:
            self.logger.log_info(f"[vllm] Awaiting remaining {len(self.tasks)} requests")
            await asyncio.wait(set(self.tasks), timeout=drain_seconds)
        for task in set(self.tasks):
            task.cancel()  # each task answers its request and aborts it in the engine
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=5)
        shutdown_engine(self.engine)

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

    def _lora_request(self, lora_name: str | None):
        return self.engine_config.lora_request(lora_name)

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
        task = request_task(request)
        if task not in self.supported_tasks:
            raise ValueError(f"Model {self.args['model_name']} does not support '{task}' request")
        if task == "embed":
            await self._embed(request, state)
            return
        inputs = parse_generate_inputs(request)
        # A refused value logs its cause and fails the request as the real backend's does.
        sampling_params, lora_name = build_sampling_params(inputs.sampling_json, self.logger)
        lora_request = self._lora_request(lora_name)
        prompt = await render_prompt(self.engine, inputs.prompt, inputs.images)

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

    async def _embed(self, request, state: SenderState) -> None:
        """An embedding request, as the real backend serves it: never streamed, so checked for
        cancellation after each engine output on the event loop, then one response with FINAL
        (also after a cancellation: the last output so far)."""
        from vllm.pooling_params import PoolingParams  # noqa: PLC0415  (vLLM is loaded by now)

        inputs = parse_embed_inputs(request)
        params = PoolingParams(task="embed") if inputs.dimensions is None else PoolingParams(
            dimensions=inputs.dimensions, task="embed")
        prompt = await render_input(self.engine, inputs.prompt)  # rendered as `generate`'s prompts are
        request_id = uuid.uuid4().hex
        outputs = self.engine.encode(prompt, params, request_id)
        last_output = None
        try:
            async for request_output in outputs:
                last_output = request_output
                if await self._is_cancelled(state, False):
                    self.logger.log_info("[vllm] Cancelling the request")
                    await self.engine.abort(request_id)
                    self.logger.log_info("[vllm] Successfully cancelled the request")
                    break
        finally:
            await outputs.aclose()
        if last_output is None:  # the engine ended without an output
            self._queue_final(state, None)
            return
        state.final_queued = True
        state.sender.send(embedding_response(last_output, inputs.returns, self.text_dtype), FINAL)

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
