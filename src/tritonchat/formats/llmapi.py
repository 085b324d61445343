"""Request format of TensorRT-LLM's LLM API Triton model (`llmapi`).

NVIDIA's `triton_backend/all_models/llmapi/tensorrt_llm` is a Python model around
`tensorrt_llm.LLM`: text in, text out, no batch dimension (`max_batch_size: 0`, set in its
`model.yaml`), sampling settings as separate `sampling_param_*` tensors. What a client sees:

- `text_output` holds `CompletionOutput.text`, the *whole* text generated so far, in every
  streamed response (not the new part): this format sends only what is new.
- `finish_reason` (with `return_finish_reason`) is `str()` of the output's reason: "None"
  until the last response, then "stop", "length", "timeout" or "cancelled".
- `stop_reason` (with `return_stop_reason`, newer releases) is the stop string or token id
  that ended it, else "None". The engine matches stop words on token ids and removes a matched
  word from the final text, but in a stream the first tokens of a multi-token stop word were
  already sent: this format holds back text that may begin a stop string (vLLM's behaviour)
  and drops it when the engine reports that stop string.
- `sampling_param_exclude_input_from_output` defaults to false in that model, so a whole
  (non-streamed) text would start with the prompt: this format always sends true.
- No token counts, no log probabilities, no `n` (one output per request), and each choice is
  its own request. Tokens are counted here, one per streamed response (one per engine step;
  the last response holds a token unless generation ended at EOS; speculative decoding would
  be undercounted). So this format asks a decoupled model for a stream even when the client
  wants a whole answer: the usage is the engine's, the same both ways, and a stop string cut
  here ends the engine's work at once. Only a model that is not decoupled answers whole; its
  text is then counted with the tokenizer.
- With no temperature, top-p or top-k at all the LLM API samples greedily, and without a
  seed every request uses the same one: top-p 1 is sent unless the request sets one, and a
  random seed per request unless it sets one (as for the other TensorRT-LLM formats).
- `streaming` is only allowed when the model is decoupled (its `model.yaml` says
  `decoupled: False` by default); against a model that is not, a streamed chat request is
  served from one whole response.
- LoRA (newer releases): `lora_id`, `lora_name` and `lora_path` together, the path on the
  server's file system (setting `lora_paths`).
"""

from __future__ import annotations

import random

import numpy as np

from ..errors import BadRequestError, CancelledError, NotFoundError
from .base import (
    Decoder,
    GenerationOutput,
    GenerationRequest,
    RequestFormat,
    first_text,
    string_tensor,
    with_eos_texts,
)
from .detokenize import StopStrings

# vLLM sampling names -> (llmapi input, dtype).
_SAMPLING_INPUTS = {
    "temperature": ("sampling_param_temperature", np.float32),
    "presence_penalty": ("sampling_param_presence_penalty", np.float32),
    "frequency_penalty": ("sampling_param_frequency_penalty", np.float32),
}
# Request fields the model has no input for, by vLLM sampling name -> OpenAI/vLLM field.
_UNSUPPORTED = ("min_p", "logit_bias", "ignore_eos", "include_stop_str_in_output", "bad_words",
                "allowed_token_ids", "spaces_between_special_tokens", "repetition_penalty", "min_tokens",
                "stop_token_ids", "skip_special_tokens")
_TRUE = np.array([True])
# The LLM API's finish reasons (tensorrt_llm/executor/result.py, CompletionOutput.finish_reason).
_FINISH_REASONS = {"stop": "stop", "length": "length", "timeout": "length"}



class LlmApiFormat(RequestFormat):
    """TensorRT-LLM's LLM API Triton model (`llmapi/tensorrt_llm`)."""

    name = "llmapi"

    def image_refusal(self) -> str | None:
        return ("TensorRT-LLM's LLM API model takes a text prompt only (it has no input for images); serve vision "
                "models on Triton's vLLM backend (request_format vllm)")

    def check(self, request: GenerationRequest) -> None:
        if request.images:
            raise BadRequestError(f"Images are not supported here: {self.image_refusal()}.", param="messages")
        for key in _UNSUPPORTED:
            if key in request.sampling:
                raise BadRequestError(
                    f"'{key}' is not supported by TensorRT-LLM's LLM API model: it has no input for it.", param=key)
        if request.logprobs is not None:
            raise BadRequestError(
                "'logprobs' is not supported by TensorRT-LLM's LLM API model: it returns no per-token log "
                "probabilities.", param="logprobs")
        if request.structured:
            raise BadRequestError(
                "Constrained generation (response_format, structured_outputs, or a named or required tool_choice) is "
                "not supported by TensorRT-LLM's LLM API model: it has no input for it.", param="response_format")
        options = self.options
        if request.lora_name:
            if request.lora_name not in options.lora_paths:
                raise NotFoundError(f"The LoRA adapter {request.lora_name!r} has no path configured (lora_paths).")
            if not options.takes("lora_path"):
                raise BadRequestError(
                    f"The generation model {options.target_model!r} takes no LoRA adapter (lora_id, lora_name and "
                    "lora_path came with later releases).", param="model")
        if "seed" in request.sampling and not options.takes("sampling_param_seed"):
            raise BadRequestError(f"The generation model {options.target_model!r} takes no input for 'seed'.", param="seed")
        if options.tokenizer is None:
            raise BadRequestError("The llmapi request format needs a tokenizer.")

    def stop_strings(self, request: GenerationRequest) -> list[str]:
        """The request's stop strings, then the text of each EOS id other than the tokenizer's
        own (which the engine stops at anyway): the model takes stop words only as text."""
        tokenizer = self.options.tokenizer
        own = getattr(tokenizer, "eos_token_id", None)
        extra = [token for token in self.options.eos_token_ids if token != own]
        return with_eos_texts(tokenizer, list(request.sampling.get("stop") or []), extra)

    def inputs(self, request: GenerationRequest) -> dict[str, np.ndarray]:
        sampling = request.sampling
        options = self.options
        inputs = {
            "text_input": string_tensor(request.prompt),
            "streaming": np.array([options.target_decoupled]),  # see the module's docstring
            "sampling_param_max_tokens": np.array([request.max_tokens], dtype=np.int32),
            # Without temperature, top-p and top-k the LLM API is greedy; OpenAI's top_p defaults to 1.
            "sampling_param_top_p": np.array([sampling.get("top_p", 1.0)], dtype=np.float32),
            "sampling_param_exclude_input_from_output": _TRUE,
            "return_finish_reason": _TRUE,
        }
        for key, (name, dtype) in _SAMPLING_INPUTS.items():
            if key in sampling:
                inputs[name] = np.array([sampling[key]], dtype=dtype)
        if sampling.get("top_k", 0) > 0:
            inputs["sampling_param_top_k"] = np.array([sampling["top_k"]], dtype=np.int32)
        if options.takes("sampling_param_seed"):
            seed = sampling["seed"] if "seed" in sampling else random.getrandbits(64)
            inputs["sampling_param_seed"] = np.array([seed % 2**64], dtype=np.uint64)
        stops = self.stop_strings(request)
        if stops:
            inputs["sampling_param_stop"] = np.array([stop.encode("utf-8") for stop in stops], dtype=np.object_)
        if options.takes("return_stop_reason"):
            inputs["return_stop_reason"] = _TRUE
        if request.lora_name:
            names = sorted(options.lora_paths)
            inputs["lora_id"] = np.array([names.index(request.lora_name) + 1], dtype=np.uint64)
            inputs["lora_name"] = string_tensor(request.lora_name)
            inputs["lora_path"] = string_tensor(options.lora_paths[request.lora_name])
        return inputs

    def requested_outputs(self, request: GenerationRequest) -> list[str]:
        outputs = ["text_output", "finish_reason"]
        if self.options.takes("return_stop_reason"):
            outputs.append("stop_reason")
        return outputs

    def decoder(self, request: GenerationRequest) -> Decoder:
        return LlmApiDecoder(self, request)


class LlmApiDecoder(Decoder):
    """Turns the model's whole-text-so-far responses into new text, cuts stop strings and counts tokens."""

    def __init__(self, request_format: LlmApiFormat, request: GenerationRequest):
        super().__init__(request_format, request)
        self.stop_list = request_format.stop_strings(request)
        self.stops = StopStrings(self.stop_list)
        self.seen = ""  # the engine's text so far
        self.streamed = request_format.options.target_decoupled
        self.completion_tokens = 0
        self.counted = False

    @property
    def finished(self) -> bool:  # type: ignore[override]
        return self.stops.matched

    def decode(self, outputs: dict[str, np.ndarray]) -> GenerationOutput:
        text = first_text(outputs.get("text_output")) or ""
        new = ""
        if text.startswith(self.seen):  # the whole text so far: only its end is new
            new, self.seen = text[len(self.seen):], text
        out = GenerationOutput(text=self.stops.push(new))
        reason = first_text(outputs.get("finish_reason"))
        ended = reason not in (None, "", "None")
        stop_reason = first_text(outputs.get("stop_reason"))
        if self.streamed:  # one engine step per response; the end at EOS adds none
            out.completion_tokens = 0 if ended and reason == "stop" and stop_reason in (None, "None") else 1
            self.completion_tokens += out.completion_tokens
        if ended:
            if reason == "cancelled":
                raise CancelledError("The generation model cancelled the generation.")
            if reason == "stop" and stop_reason in self.stop_list:
                self.stops.flush()  # the engine matched that stop string: what was held back is its beginning
            else:
                out.text += self.stops.flush()
            out.finish_reason = _FINISH_REASONS.get(reason, reason)
        if self.stops.matched:
            out.finish_reason = "stop"
        if out.finish_reason is not None:
            self._count(out)
        return out

    def _count(self, out: GenerationOutput) -> None:
        if not self.counted:
            self.counted = True
            out.prompt_tokens = self.request.prompt_tokens
            if not self.streamed:
                tokenizer = self.format.options.tokenizer
                out.completion_tokens = len(tokenizer(self.seen, add_special_tokens=False).input_ids) if self.seen else 0
                self.completion_tokens = out.completion_tokens

    def end(self) -> GenerationOutput | None:
        if self.counted:
            return None
        out = GenerationOutput(text=self.stops.flush())
        self._count(out)
        out.finish_reason = "length" if self.completion_tokens >= self.request.max_tokens else "stop"
        return out
