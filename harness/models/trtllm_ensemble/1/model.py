"""A scripted stand-in for NVIDIA's TensorRT-LLM `ensemble` / `tensorrt_llm_bls` models.

The real models cannot run here (they need a TensorRT engine on a GPU). This one has the
same tensor interface (see config.pbtxt) and imitates what a client of theirs observes;
what it "generates" is chosen by the test through the prompt.

Script: the prompt may contain `SCRIPT:` followed by a JSON object on the rest of the line.
Keys (all optional):
  text           the generated text (default DEFAULT_TEXT: leading space, multi-byte
                 characters); it is tokenized without special tokens
  ids            the generated token ids instead of `text`
  finish         "stop" (default): after the text the engine samples end_id (the `end_id`
                 input, else the tokenizer's EOS), like a model ending its answer;
                 "length": the engine produces nothing more (no end_id)
  interval_ms    delay before each token (default 0); first_delay_ms: extra before the first
  error_after    fail after this many tokens (error_message; default "scripted failure")
  hang_after     after this many tokens produce nothing until cancelled or hang_s (default 30)
  samples        alternative texts, one chosen by TensorRT-LLM's sampling rules (see
                 `sampled_script`: greedy takes the first)
  echo_request   true: the output is one JSON object describing every input tensor received
                 ({"inputs": {name: {"dtype", "shape", "value"}}, "requested_outputs", "request_id"})

Generation (what the real preprocessing + tensorrt_llm do):
- the prompt is tokenized like the preprocessing model (special tokens added when the
  parameter `add_special_tokens` is true); num_input_tokens is that count;
- output tokens are produced one at a time; generation ends
  * after `max_tokens` tokens (no end_id then: the budget ran out first),
  * at end_id: a script token equal to end_id, or after the text when finish is "stop";
    end_id itself is never returned,
  * at a stop word: each `stop_words` entry is tokenized on its own (no special tokens) and
    generation stops as soon as the generated tokens end with one of those token
    sequences. The stop word's tokens ARE in the output (TRT-LLM keeps them; only the
    BLS additionally cuts the text at string level). The match is on tokens, as in the
    engine: a word whose standalone tokenization differs from its tokens inside the text
    (e.g. "world" vs " world" with byte-level BPE) does not stop generation.
  Sampling parameters choose between `samples` only (TensorRT-LLM's defaults, see
  `sampled_script`); `min_tokens`, bad_words, LoRA, guided decoding: recorded (echo_request)
  but without effect.

Responses (decoupled; every tensor has the batch dimension, batch size 1):
- stream=true: one response per generated token, `text_output` [1, 1] = that token decoded
  on its own, `tokenizer.decode([id])`, like the real postprocessing model, which decodes
  each streamed token in isolation: with byte-level BPE a multi-byte character split over
  tokens comes out as U+FFFD pieces, with SentencePiece leading spaces are lost
  (tensorrtllm_backend issues #34, #112, #332). exclude_input_in_output has no effect
  (the engine never streams the prompt). When generation ended at end_id, the engine's last
  streamed result holds no new token, so one more response follows with text_output "" and
  num_output_tokens 0. Then a response-less send with only the FINAL flag, as
  tensorrt_llm_bls (`send(flags=FINAL)`) and the ensemble scheduler do.
- stream=false: one response with the whole text decoded at once: prompt tokens + output
  tokens (so the re-decoded prompt comes first) unless exclude_input_in_output is true; then
  the flag-only FINAL. num_output_tokens counts the tokens of that response, so it includes
  the prompt tokens when the prompt is included (the C++ backend counts the output_ids it
  returns).
- num_input_tokens / num_output_tokens (INT32 [1, 1]) only when return_num_input_tokens /
  return_num_output_tokens are true; cum_log_probs [1, 1] and output_log_probs [1, 1, n]
  (made up: token i of the output has log-prob -0.1 * (i + 1)) only when return_log_probs.
- errors (scripted, or bad input such as max_tokens <= 0): a response carrying only a
  TritonError, then the flag-only FINAL (the BLS's shape).
- cancellation: `request.is_cancelled()` is checked before every token; a cancelled request
  logs a line and gets the flag-only FINAL.
"""

import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils

from trtllm_stub_common import (  # linked into this directory, which is on sys.path
    ScriptTiming,
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


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        tokenizer_dir = params.get("tokenizer_dir", "")
        if not tokenizer_dir:
            raise pb_utils.TritonModelException("parameter 'tokenizer_dir' must name a tokenizer directory")
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self.add_special_tokens = params.get("add_special_tokens", "true").lower() in ("true", "1", "yes")
        self.model_name = args["model_name"]

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._serve, args=(request,), daemon=True).start()
        return None

    def _serve(self, request):
        sender = request.get_response_sender()
        try:
            self._generate(request, sender)
        except Exception as exc:  # noqa: BLE001
            sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(exc))))
        finally:
            try:
                sender.send(flags=FINAL)
            except Exception as exc:  # noqa: BLE001  (the client may be gone)
                pb_utils.Logger.log_warn(f"{self.model_name}: final flag not sent: {exc}")

    def _cancelled(self, request, produced: int) -> bool:
        if request.is_cancelled():
            pb_utils.Logger.log_info(
                f"{self.model_name}: request {request.request_id()!r} cancelled after {produced} tokens"
            )
            return True
        return False

    def _generate(self, request, sender):
        text_input = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
        if text_input.shape[0] != 1:
            raise ValueError(f"this mock serves batch size 1 per request; got {text_input.shape[0]}")
        prompt = text_input.reshape(-1)[0].decode("utf-8")
        max_tokens = pb_utils.get_input_tensor_by_name(request, "max_tokens").as_numpy()
        if max_tokens.size != 1 or int(max_tokens.reshape(-1)[0]) <= 0:
            raise ValueError("max_tokens must be a single value > 0")
        max_tokens = int(max_tokens.reshape(-1)[0])
        stream = bool(first_value(request, "stream", False))
        exclude_input = bool(first_value(request, "exclude_input_in_output", False))
        want_input_count = bool(first_value(request, "return_num_input_tokens", False))
        want_output_count = bool(first_value(request, "return_num_output_tokens", False))
        want_log_probs = bool(first_value(request, "return_log_probs", False))
        script = parse_script(prompt)
        script = sampled_script(script, request, "top_k", "top_p")
        prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=self.add_special_tokens)

        def response(text: str, output_count: int, first_index: int, log_prob_count: int):
            tensors = [pb_utils.Tensor("text_output", np.array([[text.encode("utf-8")]], dtype=np.object_))]
            if want_input_count:
                tensors.append(pb_utils.Tensor("num_input_tokens", np.array([[len(prompt_ids)]], dtype=np.int32)))
            if want_output_count:
                tensors.append(pb_utils.Tensor("num_output_tokens", np.array([[output_count]], dtype=np.int32)))
            if want_log_probs:
                values = [log_prob(first_index + i) for i in range(log_prob_count)]
                cumulative = sum(log_prob(i) for i in range(first_index + log_prob_count))
                tensors.append(pb_utils.Tensor("output_log_probs", np.array([[values]], dtype=np.float32)))
                tensors.append(pb_utils.Tensor("cum_log_probs", np.array([[cumulative]], dtype=np.float32)))
            return pb_utils.InferenceResponse(output_tensors=tensors)

        if script.get("echo_request"):
            description = {
                "inputs": describe_inputs(request),
                "requested_outputs": sorted(request.requested_output_names()),
                "request_id": request.request_id(),
            }
            sender.send(response(json.dumps(description), 0, 0, 0))
            return

        ids, starts = scripted_tokens(script, self.tokenizer)
        end_id = first_value(request, "end_id", self.tokenizer.eos_token_id)
        stop_words = pb_utils.get_input_tensor_by_name(request, "stop_words")
        stop_sequences = []
        if stop_words is not None:
            for word in stop_words.as_numpy().reshape(-1):
                word = word.decode("utf-8") if isinstance(word, bytes) else str(word)
                seq = self.tokenizer.encode(word, add_special_tokens=False) if word else []
                if seq:
                    stop_sequences.append(seq)
        out, reason = plan_generation(ids, max_tokens, end_id, stop_sequences, scripted_finish(script))

        timing = ScriptTiming(script, starts, len(ids))

        def step(i: int) -> bool:
            """Wait for token i; False when the request was cancelled."""
            timing.wait(i, request.is_cancelled)
            if self._cancelled(request, i):
                return False
            if timing.fails_at(i):
                raise timing.error()
            return True

        for i, token in enumerate(out):
            if not step(i):
                return
            if stream:
                sender.send(response(self.tokenizer.decode([token], skip_special_tokens=True), 1, i, 1))
        if timing.error_after is not None:
            raise timing.error()
        if stream:
            if reason == "end_id":
                sender.send(response("", 0, len(out), 0))
            return
        tokens = out if exclude_input else prompt_ids + out
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        sender.send(response(text, len(tokens), 0, len(out)))
