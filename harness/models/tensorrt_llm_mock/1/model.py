"""A scripted stand-in for NVIDIA's `tensorrt_llm` model (the C++ TensorRT-LLM backend).

The real model needs a TensorRT engine on a GPU. This one has its tensor interface (see
config.pbtxt) and imitates what a client observes: token ids in, token ids out. What it
"generates" is chosen by the test: `input_ids` are decoded with the tokenizer (parameter
`tokenizer_dir`) and may contain `SCRIPT:` followed by a JSON object on the rest of the line.
Keys (all optional):
  text           the generated text (default DEFAULT_TEXT), tokenized without special tokens
  ids            the generated token ids instead of `text` (may contain end_id)
  finish         "stop" (default): after the text the engine samples end_id; "length": nothing
                 more is produced (no end_id)
  interval_ms    delay before each token (default 0); first_delay_ms: extra before the first
  error_after    fail after this many tokens (error_message; default "scripted failure")
  hang_after     after this many tokens produce nothing until cancelled / stopped or hang_s
  samples        alternative texts, one chosen by TensorRT-LLM's sampling rules (see
                 `sampled_script`: greedy takes the first)
  echo_request   true: the output is the token ids of one JSON object describing every input
                 tensor received ({"inputs": {name: {"dtype", "shape", "value"}},
                 "requested_outputs", "request_id"}); decode output_ids to read it

Generation ends
- after `request_output_len` tokens;
- at end_id (the `end_id` input; without one the tokenizer's EOS): a scripted id equal to it,
  or after the text when finish is "stop". end_id itself is not returned;
- at a stop sequence of `stop_words_list`: the generated tokens end with one of its token
  sequences; the stop sequence's tokens are returned (the engine keeps them).
  `stop_words_list` / `bad_words_list` format (NVIDIA's preprocessing `_to_word_list_format`
  and the C++ backend): per batch item a [2, L] INT32 tensor (request shape [1, 2, L]); row 0
  holds the token ids of all words concatenated (padded with 0), row 1 the cumulative end
  offset of each word in row 0, padded with -1. Example: words [[5, 6], [7]] ->
  [[5, 6, 7], [2, 3, -1]] (any padding length). Empty list: shape [1, 2, 0].
Sampling parameters choose between `samples` only (TensorRT-LLM's defaults, see `sampled_script`);
bad words, LoRA, guided decoding, min_tokens: recorded, without effect.

Responses (as the C++ backend's `fillTritonResponse` / `WaitForResponse` send them; every
tensor has the batch dimension of size 1):
- `output_ids` INT32 [1, beams=1, n] and `sequence_length` INT32 [1, 1] = n.
- streaming=true: one response per generated token with only that token (n = 1); the prompt
  is never sent. The end is flagged on the last response itself (TRITONSERVER_RESPONSE_
  COMPLETE_FINAL on the executor's final result; no separate empty response): on the last
  token's response when generation ended by length or stop words; when it ended at end_id,
  the engine's final result holds no new token, so the FINAL response has output_ids
  [1, 1, 0] and sequence_length [[0]].
- streaming=false: one FINAL response with all ids: prompt ids + output ids, or only the
  output ids when exclude_input_in_output is true (request input; default: the model
  parameter `exclude_input_in_output`, false).
- num_input_tokens [1, 1] (prompt length) / num_output_tokens [1, 1] (ids in this response,
  so it includes the prompt ids when they are returned) only when return_num_input_tokens /
  return_num_output_tokens are true; output_log_probs [1, 1, n] for the generated ids of the
  response (made up: generated token i has -0.1 * (i + 1)) and cum_log_probs [1, 1] (sum so
  far) only when return_log_probs is true.
- errors: one response carrying the TritonError, flagged FINAL (the backend's isFinal on error).
- cancellation (`request.is_cancelled()`, checked before every token) or a `stop`=true request
  with the same request id: a line is logged and generation ends with a FINAL response holding
  no new ids when streaming (the ids so far when not). The `stop` request itself gets an
  empty FINAL response.
"""

import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

from trtllm_stub_common import (
    ScriptTiming,  # linked into this directory, which is on sys.path
    dispatch,
    scripted_tokens,
    scripted_finish,
    parse_script,
    describe_inputs,
    first_value,
    plan_generation,
    log_prob,
    sampled_script,
)

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def parse_word_list(array: np.ndarray) -> list[list[int]]:
    """One batch item's [2, L] word list -> token sequences (see module docstring)."""
    if array.ndim != 2 or array.shape[0] != 2:
        raise ValueError(f"stop_words_list must be [batch, 2, L]; got item shape {list(array.shape)}")
    flat, offsets = array[0].tolist(), array[1].tolist()
    words, start = [], 0
    for end in offsets:
        if end < 0:
            break
        if end > len(flat) or end < start:
            raise ValueError(f"invalid word offsets {offsets} for {len(flat)} ids")
        if end > start:
            words.append(flat[start:end])
        start = end
    return words


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        tokenizer_dir = params.get("tokenizer_dir", "")
        if not tokenizer_dir:
            raise pb_utils.TritonModelException("parameter 'tokenizer_dir' must name a tokenizer directory")
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self.exclude_input_default = params.get("exclude_input_in_output", "false").lower() in ("true", "1", "yes")
        self.model_name = args["model_name"]
        self.lock = threading.Lock()
        self.stop_events: dict[str, threading.Event] = {}
        self.request_counter = 0

    def execute(self, requests):
        dispatch(requests, self._stop, self._serve)
        return None

    def _stop(self, request):
        """A `stop` request: end the generation with the same request id (the BLS uses this)."""
        sender = request.get_response_sender()
        request_id = request.request_id()
        if not request_id:
            sender.send(pb_utils.InferenceResponse(
                output_tensors=[], error=pb_utils.TritonError("Trying to stop a request but request ID is not provided")),
                flags=FINAL)
            return
        with self.lock:
            event = self.stop_events.get(request_id)
        if event is not None:
            event.set()
        sender.send(pb_utils.InferenceResponse(output_tensors=[]), flags=FINAL)

    def _serve(self, request):
        sender = request.get_response_sender()
        request_id = request.request_id()
        stop_event = threading.Event()
        with self.lock:
            self.request_counter += 1
            executor_id = self.request_counter
            if request_id:
                self.stop_events[request_id] = stop_event
        try:
            self._generate(request, sender, stop_event)
        except Exception as exc:  # noqa: BLE001
            message = f"Executor failed process requestId {executor_id} due to the following error: {exc}"
            try:
                sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message)),
                            flags=FINAL)
            except Exception as send_exc:  # noqa: BLE001  (the client may be gone)
                pb_utils.Logger.log_warn(f"{self.model_name}: error response not sent: {send_exc}")
        finally:
            with self.lock:
                if request_id and self.stop_events.get(request_id) is stop_event:
                    del self.stop_events[request_id]

    def _generate(self, request, sender, stop_event):
        input_ids = pb_utils.get_input_tensor_by_name(request, "input_ids")
        if input_ids is None:
            raise ValueError("input_ids is required")
        input_ids = input_ids.as_numpy()
        if input_ids.ndim != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"this mock serves batch size 1 per request; input_ids shape {list(input_ids.shape)}")
        input_length = int(first_value(request, "input_lengths", input_ids.shape[1]))
        prompt_ids = [int(i) for i in input_ids[0][:input_length]]
        max_tokens = int(first_value(request, "request_output_len"))
        if max_tokens <= 0:
            raise ValueError(f"request_output_len must be > 0; got {max_tokens}")
        stream = bool(first_value(request, "streaming", False))
        exclude_input = bool(first_value(request, "exclude_input_in_output", self.exclude_input_default))
        want_input_count = bool(first_value(request, "return_num_input_tokens", False))
        want_output_count = bool(first_value(request, "return_num_output_tokens", False))
        want_log_probs = bool(first_value(request, "return_log_probs", False))
        script = parse_script(self.tokenizer.decode(prompt_ids))
        script = sampled_script(script, request, "runtime_top_k", "runtime_top_p")

        def response(ids: list[int], first_index: int, log_prob_count: int):
            tensors = [
                pb_utils.Tensor("output_ids", np.array(ids, dtype=np.int32).reshape(1, 1, len(ids))),
                pb_utils.Tensor("sequence_length", np.array([[len(ids)]], dtype=np.int32)),
            ]
            if want_input_count:
                tensors.append(pb_utils.Tensor("num_input_tokens", np.array([[len(prompt_ids)]], dtype=np.int32)))
            if want_output_count:
                tensors.append(pb_utils.Tensor("num_output_tokens", np.array([[len(ids)]], dtype=np.int32)))
            if want_log_probs:
                values = [log_prob(first_index + i) for i in range(log_prob_count)]
                cumulative = sum(log_prob(i) for i in range(first_index + log_prob_count))
                tensors.append(pb_utils.Tensor(
                    "output_log_probs", np.array(values, dtype=np.float32).reshape(1, 1, log_prob_count)))
                tensors.append(pb_utils.Tensor("cum_log_probs", np.array([[cumulative]], dtype=np.float32)))
            return pb_utils.InferenceResponse(output_tensors=tensors)

        if script.get("echo_request"):
            description = {
                "inputs": describe_inputs(request),
                "requested_outputs": sorted(request.requested_output_names()),
                "request_id": request.request_id(),
            }
            sender.send(response(self.tokenizer.encode(json.dumps(description), add_special_tokens=False), 0, 0),
                        flags=FINAL)
            return

        ids, starts = scripted_tokens(script, self.tokenizer)
        end_id = first_value(request, "end_id", self.tokenizer.eos_token_id)
        stop_words = pb_utils.get_input_tensor_by_name(request, "stop_words_list")
        stop_sequences = parse_word_list(stop_words.as_numpy()[0]) if stop_words is not None else []
        out, reason = plan_generation(ids, max_tokens, end_id, stop_sequences, scripted_finish(script))

        timing = ScriptTiming(script, starts, len(ids))

        def ended(i: int) -> bool:
            if request.is_cancelled() or stop_event.is_set():
                why = "cancelled" if request.is_cancelled() else "stopped"
                pb_utils.Logger.log_info(f"{self.model_name}: request {request.request_id()!r} {why} after {i} tokens")
                return True
            return False

        generated = 0
        for i, token in enumerate(out):
            timing.wait(i, lambda: request.is_cancelled() or stop_event.is_set())
            if ended(i):
                if stream:
                    sender.send(response([], i, 0), flags=FINAL)
                else:
                    done = out[:i] if exclude_input else prompt_ids + out[:i]
                    sender.send(response(done, 0, i), flags=FINAL)
                return
            if timing.fails_at(i):
                raise timing.error()
            generated = i + 1
            if stream:
                last = generated == len(out) and reason != "end_id" and timing.error_after is None
                sender.send(response([token], i, 1), flags=FINAL if last else 0)
        if timing.error_after is not None:
            raise timing.error()
        if stream:
            if reason == "end_id" or not out:
                sender.send(response([], generated, 0), flags=FINAL)
            return
        tokens = out if exclude_input else prompt_ids + out
        sender.send(response(tokens, 0, len(out)), flags=FINAL)
