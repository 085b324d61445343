"""A scripted stand-in for NVIDIA's TensorRT-LLM LLM API model (`llmapi/tensorrt_llm`).

The real model runs `tensorrt_llm.LLM` on a GPU. This one has its tensor interface (see
config.pbtxt) and imitates what a client observes, following NVIDIA's model.py / helpers.py
and the LLM API's `CompletionOutput` (tensorrt_llm/executor/result.py). What it "generates" is
chosen by the test: the prompt may contain `SCRIPT:` and a JSON object on the rest of the line,
with the keys of the TensorRT-LLM stand-ins (text, ids, chunks, repeat, finish, interval_ms,
first_delay_ms, error_after, error_message, hang_after, hang_s, samples, echo_request; see
harness/models/tensorrt_llm_mock/1/model.py). The tokenizer is the one `model` names in
1/model.yaml.

Configuration, as the real model: `auto_complete_config` sets `max_batch_size` and the
decoupled policy from model.yaml's `triton_config` (NVIDIA ships `max_batch_size: 0`,
`decoupled: False`).

Requests (NVIDIA's `_convert_request` and helpers):
- `text_input` must be 1-D ([1]); its first element is the prompt.
- `streaming` true on a model that is not decoupled fails: "Streaming is only supported in
  decoupled mode."
- Sampling (`SamplingParams`): `sampling_param_max_tokens` defaults to 32 (the LLM API's
  default); with none of temperature, top-p and top-k sent the sampler is greedy (the LLM API
  rule), as with temperature 0 or top-k 1: the first of a script's `samples`; otherwise the
  seed (default 0, the same for every request) picks one.
- `sampling_param_stop`: strings, tokenized; generation stops when the generated ids end
  with one; its ids are then removed from the output (include_stop_str_in_output false).
- It stops at the tokenizer's EOS (not returned), and after max_tokens.
- `sampling_param_exclude_input_from_output` defaults to false: a whole (non-streamed) text
  then starts with the prompt text.
- `lora_id`, `lora_name`, `lora_path`: all three or none ("lora_id, lora_name, and lora_path
  must all be provided together"); the path must exist on this machine.
- `stop` true: the requests with this request id are aborted; the `stop` request gets a
  CANCELLED error ("Request cancelled by client").

Responses:
- `text_output` [n=1]: `CompletionOutput.text`, the whole text so far (decoded with special
  tokens skipped; text ending in an incomplete character is held back), in every streamed
  response, one response per generated token. When generation ends at EOS, one more
  response with the same text ends the stream; when it ends at a stop string, the last
  response has the text of the ids before the stop string's last token (the start of a
  multi-token stop string, already streamed, stays), as the LLM API's incremental decoding
  gives after it trims the stop ids.
- `finish_reason` [1] (only with `return_finish_reason`): str() of the reason, "None" until
  the last response, then "stop" or "length". `stop_reason` (with `return_stop_reason`): the
  stop string that matched, else "None".
- Not streaming: one response with the whole text.
- Errors: one FINAL response with `text_output` ["N/A"] and the error "Error generating
  request: <message>".
- Cancellation (`request.is_cancelled()`, checked before every token, as the model's
  cancellation loop does every 100 ms): a FINAL response with the CANCELLED error "Request
  cancelled by client".
"""

import json
import os
import random
import threading

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml

from trtllm_stub_common import (  # linked into this directory, which is on sys.path
    ScriptTiming,
    describe_inputs,
    dispatch,
    first_value,
    parse_script,
    scripted_finish,
    scripted_tokens,
)

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def read_model_yaml() -> dict:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.environ.get("LLM_CONFIG_PATH", "model.yaml"))
    with open(path) as file:
        return yaml.safe_load(file)


def has_input(request, name: str) -> bool:
    return pb_utils.get_input_tensor_by_name(request, name) is not None


class TritonPythonModel:
    @classmethod
    def auto_complete_config(cls, auto_complete_model_config):
        triton_config = read_model_yaml()["triton_config"]
        auto_complete_model_config.set_model_transaction_policy(dict(decoupled=bool(triton_config["decoupled"])))
        auto_complete_model_config.set_max_batch_size(int(triton_config["max_batch_size"]))
        return auto_complete_model_config

    def initialize(self, args):
        config = read_model_yaml()
        self.decoupled = bool(config["triton_config"]["decoupled"])
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(config["model"])
        self.model_name = args["model_name"]
        self.lock = threading.Lock()
        self.stop_events: dict[str, set] = {}

    def execute(self, requests):
        dispatch(requests, self._stop, self._serve)
        return None

    def _stop(self, request):
        sender = request.get_response_sender()
        request_id = request.request_id()
        if not request_id:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "A request id must be provided for request cancellation")), flags=FINAL)
            return
        with self.lock:
            for event in self.stop_events.pop(request_id, set()):
                event.set()
        sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
            "Request cancelled by client", pb_utils.TritonError.CANCELLED)), flags=FINAL)

    def _serve(self, request):
        sender = request.get_response_sender()
        request_id = request.request_id()
        stop_event = threading.Event()
        with self.lock:
            if request_id:
                self.stop_events.setdefault(request_id, set()).add(stop_event)
        try:
            self._generate(request, sender, stop_event)
        except Exception as exc:  # noqa: BLE001
            pb_utils.Logger.log_error(f"[trtllm] Error generating request: {exc}")
            response = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("text_output", np.asarray(["N/A"], dtype=np.object_))],
                error=pb_utils.TritonError(f"Error generating request: {exc}"))
            try:
                sender.send(response, flags=FINAL)
            except Exception as send_exc:  # noqa: BLE001  (the client may be gone)
                pb_utils.Logger.log_warn(f"{self.model_name}: error response not sent: {send_exc}")
        finally:
            with self.lock:
                events = self.stop_events.get(request_id)
                if events is not None:
                    events.discard(stop_event)
                    if not events:
                        del self.stop_events[request_id]

    def _lora(self, request):
        present = [has_input(request, name) for name in ("lora_id", "lora_name", "lora_path")]
        if not any(present):
            return None
        if not all(present):
            raise pb_utils.TritonModelException("lora_id, lora_name, and lora_path must all be provided together")
        path = pb_utils.get_input_tensor_by_name(request, "lora_path").as_numpy().reshape(-1)[0]
        path = path.decode("utf-8") if isinstance(path, bytes) else str(path)
        if not os.path.exists(path):
            raise pb_utils.TritonModelException(
                f"lora_path does not exist on the Triton server's filesystem: {path}")
        return path

    def _sampled_script(self, script: dict, request) -> dict:
        samples = script.get("samples")
        if not samples:
            return script
        given = [has_input(request, f"sampling_param_{name}") for name in ("temperature", "top_p", "top_k")]
        temperature = float(first_value(request, "sampling_param_temperature", 1.0))
        top_k = int(first_value(request, "sampling_param_top_k", 0) or 0)
        greedy = not any(given) or temperature == 0.0 or top_k == 1
        seed = int(first_value(request, "sampling_param_seed", 0))
        text = samples[0] if greedy else samples[random.Random(seed).randrange(len(samples))]
        return {**script, "text": text}

    def _generate(self, request, sender, stop_event):
        text_input = pb_utils.get_input_tensor_by_name(request, "text_input")
        if text_input is None:
            raise pb_utils.TritonModelException("text_input is missing from the request")
        text_input = text_input.as_numpy()
        if len(text_input.shape) > 1:
            raise pb_utils.TritonModelException(
                "The current implementation only supports text_input being a 1D tensor.")
        prompt = text_input[0]
        prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
        streaming = bool(first_value(request, "streaming", False))
        if streaming and not self.decoupled:
            raise pb_utils.TritonModelException("Streaming is only supported in decoupled mode.")
        self._lora(request)
        max_tokens = int(first_value(request, "sampling_param_max_tokens", 32))
        exclude_input = bool(first_value(request, "sampling_param_exclude_input_from_output", False))
        want_finish = bool(first_value(request, "return_finish_reason", False))
        want_stop_reason = bool(first_value(request, "return_stop_reason", False))
        stop_tensor = pb_utils.get_input_tensor_by_name(request, "sampling_param_stop")
        stops = []
        if stop_tensor is not None:
            stops = [s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in stop_tensor.as_numpy().reshape(-1)]
        stop_ids = [(stop, self.tokenizer.encode(stop, add_special_tokens=False)) for stop in stops]

        def response(text: str, finish=None, stop_reason=None):
            tensors = [pb_utils.Tensor("text_output", np.asarray([text.encode("utf-8")], dtype=np.object_))]
            if want_finish:
                tensors.append(pb_utils.Tensor("finish_reason", np.asarray([str(finish)], dtype=np.object_)))
            if want_stop_reason:
                tensors.append(pb_utils.Tensor("stop_reason", np.asarray([str(stop_reason)], dtype=np.object_)))
            return pb_utils.InferenceResponse(output_tensors=tensors)

        script = self._sampled_script(parse_script(prompt), request)
        if script.get("echo_request"):
            description = {
                "inputs": describe_inputs(request),
                "requested_outputs": sorted(request.requested_output_names()),
                "request_id": request.request_id(),
            }
            sender.send(response(json.dumps(description), "stop"), flags=FINAL)
            return

        ids, starts = scripted_tokens(script, self.tokenizer)
        eos = self.tokenizer.eos_token_id
        if scripted_finish(script) == "stop" and eos is not None:
            ids = ids + [eos]
        timing = ScriptTiming(script, starts, len(ids))

        out: list[int] = []
        text = ""  # CompletionOutput.text: stable, an incomplete character held back

        def decoded(tokens) -> str:
            whole = self.tokenizer.decode(tokens, skip_special_tokens=True)
            return text if whole.endswith("\ufffd") else whole

        finish, stop_reason = None, None
        for i, token in enumerate(ids):
            timing.wait(i, lambda: request.is_cancelled() or stop_event.is_set())
            if request.is_cancelled() or stop_event.is_set():
                pb_utils.Logger.log_info(f"{self.model_name}: request {request.request_id()!r} cancelled after {i} tokens")
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "Request cancelled by client", pb_utils.TritonError.CANCELLED)), flags=FINAL)
                return
            if timing.fails_at(i):
                raise timing.error()
            if token == eos:
                finish = "stop"
                break
            out.append(token)
            matched = next((stop for stop, seq in stop_ids if seq and out[-len(seq):] == seq), None)
            if matched is not None:
                finish, stop_reason = "stop", matched
                del out[-len(dict(stop_ids)[matched]):]
                break
            if len(out) >= max_tokens:
                finish = "length"
                text = decoded(out)
                break
            text = decoded(out)
            if streaming:
                sender.send(response(text))
        else:  # the script ran out without EOS ("finish": "length")
            if timing.error_after is not None:
                raise timing.error()
            finish = "length"
        if streaming:
            sender.send(response(text, finish, stop_reason), flags=FINAL)
            return
        whole = self.tokenizer.decode(out, skip_special_tokens=True)
        sender.send(response(whole if exclude_input else prompt + whole, finish, stop_reason), flags=FINAL)
