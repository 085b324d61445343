"""Request formats of NVIDIA's TensorRT-LLM Triton models.

`trtllm`: the `ensemble` / `tensorrt_llm_bls` interface. Text in, text out; every tensor
has a batch dimension (`[1, 1]`); sampling settings are separate tensors with fixed
dtypes; the streamed `text_output` is whatever the postprocessing model decoded for the
new token(s) (decoded alone: spaces and multi-byte characters can be lost, a known
limitation of those models); the stream ends with an empty FINAL response.

`tensorrt_llm`: the `tensorrt_llm` model itself, with token ids. This format tokenizes
the prompt, decodes the streamed ids incrementally (spaces and multi-byte characters come
out right) and counts tokens exactly, so the preprocessing/postprocessing hops disappear.

Neither reports why generation stopped: stop strings are cut out here (the engine keeps a
stop word in its output), and the reason is `stop` unless the token budget ran out.
"""

from __future__ import annotations

import json
import re
import random

import numpy as np

from ..errors import BadRequestError, NotFoundError
from .base import Decoder, GenerationOutput, GenerationRequest, RequestFormat, element_text, first_int, with_eos_texts
from .tensorrt_llm_decoders import TensorRtLlmDecoder, TrtllmDecoder

# vLLM sampling names -> (TensorRT-LLM input, dtype); both formats.
_SAMPLING_INPUTS = {
    "temperature": ("temperature", np.float32),
    "repetition_penalty": ("repetition_penalty", np.float32),
    "presence_penalty": ("presence_penalty", np.float32),
    "frequency_penalty": ("frequency_penalty", np.float32),
}
# Request fields these models cannot honour, by vLLM sampling name -> OpenAI field.
_UNSUPPORTED = {"min_p": "min_p", "logit_bias": "logit_bias", "ignore_eos": "ignore_eos",
                "include_stop_str_in_output": "include_stop_str_in_output", "bad_words": "bad_words",
                "allowed_token_ids": "allowed_token_ids",
                "spaces_between_special_tokens": "spaces_between_special_tokens"}


def _one(value, dtype) -> np.ndarray:
    return np.array([[value]], dtype=dtype)


def _string(value: str) -> np.ndarray:
    return np.array([[value.encode("utf-8")]], dtype=np.object_)


class _TensorRtLlmBase(RequestFormat):
    reports_finish_reason = False
    top_k_input = "top_k"
    top_p_input = "top_p"
    stop_input = "stop_words"

    def extra_eos_ids(self) -> list[int]:
        """Ids that end a turn besides the `end_id` the engine gets (sent as stop words)."""
        end_id = self.options.end_id
        if end_id is None:  # the engine's, or the preprocessing model's, default: the tokenizer's EOS
            end_id = getattr(self.options.tokenizer, "eos_token_id", None)
        return [token for token in self.options.eos_token_ids if token != end_id]

    def stop_strings(self, request: GenerationRequest) -> list[str]:
        """Strings cut out of the output here (the engine keeps a stop word in its output)."""
        return list(request.sampling.get("stop") or [])

    def check(self, request: GenerationRequest) -> None:
        if request.images:
            raise BadRequestError(f"Images are not supported here: {self.image_refusal()}.", param="messages")
        for key, field in _UNSUPPORTED.items():
            if key in request.sampling:
                raise BadRequestError(f"'{field}' is not supported by this TensorRT-LLM model.", param=field)
        if request.lora_name and request.lora_name not in self.options.lora_task_ids:
            raise NotFoundError(f"The LoRA adapter {request.lora_name!r} has no task id configured.")
        options = self.options
        # What the target's release lacks (known once its interface was read from the server).
        missing = [
            ("seed", "'seed'", "seed" in request.sampling and not options.takes(options.seed_input)),
            ("min_tokens", "'min_tokens'",
             "min_tokens" in request.sampling and not options.takes(options.min_tokens_input)),
            ("stop", "'stop'", bool(request.sampling.get("stop")) and not options.takes(self.stop_input)),
            ("response_format", "constrained generation (guided decoding)",
             bool(request.structured) and not options.takes("guided_decoding_guide_type")),
            ("model", "LoRA adapters", bool(request.lora_name) and not options.takes("lora_task_id")),
        ]
        for field, what, lacking in missing:
            if lacking:
                raise BadRequestError(f"The generation model {self.options.target_model!r} takes no input for {what}.", param=field)

    def _common_inputs(self, request: GenerationRequest) -> dict[str, np.ndarray]:
        sampling = request.sampling
        inputs: dict[str, np.ndarray] = {}
        for key, (name, dtype) in _SAMPLING_INPUTS.items():
            if key in sampling:
                inputs[name] = _one(sampling[key], dtype)
        if "top_k" in sampling and sampling["top_k"] > 0:
            inputs[self.top_k_input] = _one(sampling["top_k"], np.int32)
        # TensorRT-LLM's top-k and top-p both default to 0, which its sampler treats as top-k
        # 1 (greedy), so temperature alone would do nothing; OpenAI's top_p defaults to 1.
        inputs[self.top_p_input] = _one(sampling.get("top_p", 1.0), np.float32)
        if "min_tokens" in sampling:
            inputs[self.options.min_tokens_input] = _one(sampling["min_tokens"], np.int32)
        # Without a seed, releases before per-request random seeds use 0 for every request,
        # so the n choices (one request each) would be the same: draw one per request.
        if self.options.takes(self.options.seed_input):
            seed = sampling["seed"] if "seed" in sampling else random.getrandbits(64)
            inputs[self.options.seed_input] = _one(seed % 2**64, np.uint64)
        if self.options.end_id is not None:
            inputs["end_id"] = _one(self.options.end_id, np.int32)
        if self.options.pad_id is not None:
            inputs["pad_id"] = _one(self.options.pad_id, np.int32)
        if self.options.takes("exclude_input_in_output"):
            inputs["exclude_input_in_output"] = _one(True, np.bool_)
        if request.structured:
            guide_type, guide = guided_decoding(request.structured)
            inputs["guided_decoding_guide_type"] = _string(guide_type)
            inputs["guided_decoding_guide"] = _string(guide)
        if request.lora_name:
            inputs["lora_task_id"] = _one(self.options.lora_task_ids[request.lora_name], np.uint64)
        return inputs


def guided_decoding(structured: dict) -> tuple[str, str]:
    """A vLLM-style structured-output constraint as TensorRT-LLM's guide type and guide."""
    if structured.get("json_object"):
        return "json", ""
    if "json" in structured:
        schema = structured["json"]
        return "json_schema", schema if isinstance(schema, str) else json.dumps(schema)
    if "regex" in structured:
        return "regex", structured["regex"]
    if "choice" in structured:  # one of the strings, exactly: an alternation of literals
        return "regex", "(" + "|".join(re.escape(choice) for choice in structured["choice"]) + ")"
    if "grammar" in structured:
        return "ebnf_grammar", structured["grammar"]
    raise BadRequestError("This structured-output constraint is not supported by TensorRT-LLM.", param="structured_outputs")


class EnsembleFormat(_TensorRtLlmBase):
    """NVIDIA's `ensemble` / `tensorrt_llm_bls` models."""

    name = "trtllm"

    def image_refusal(self) -> str | None:
        return ("NVIDIA's TensorRT-LLM ensemble takes images only through its multimodal pipeline (a separate "
                "vision-encoder model whose features reach the engine as a prompt table, with model-specific "
                "preprocessing), which this request format does not drive; serve vision models on Triton's vLLM "
                "backend (request_format vllm)")

    def check(self, request: GenerationRequest) -> None:
        super().check(request)
        if "stop_token_ids" in request.sampling:
            raise BadRequestError("'stop_token_ids' is not supported by this TensorRT-LLM model.", param="stop_token_ids")
        if request.sampling.get("skip_special_tokens") is False and not self.options.keeps_special_tokens:
            raise BadRequestError(
                "'skip_special_tokens' false needs the ensemble's postprocessing model to keep special tokens "
                "(its skip_special_tokens parameter false, declared here by trtllm_skip_special_tokens false).",
                param="skip_special_tokens")
        if request.logprobs is not None:
            raise BadRequestError(
                "'logprobs' is not supported by this model: its ensemble interface returns text without token ids, "
                "so the tokens cannot be reported exactly.", param="logprobs")

    def stop_strings(self, request: GenerationRequest) -> list[str]:
        """The request's stop strings, then the text of each extra EOS token: the ensemble
        takes stop words as text (its preprocessing tokenizes them, special tokens included)."""
        return with_eos_texts(self.options.tokenizer, super().stop_strings(request), self.extra_eos_ids())

    def inputs(self, request: GenerationRequest) -> dict[str, np.ndarray]:
        inputs = {
            "text_input": _string(request.prompt),
            "max_tokens": _one(request.max_tokens, np.int32),
            "stream": _one(request.stream, np.bool_),
            **self._common_inputs(request),
        }
        stops = self.stop_strings(request)
        if stops and self.options.takes("stop_words"):
            inputs["stop_words"] = np.array([[stop.encode("utf-8") for stop in stops]], dtype=np.object_)
        if self.options.token_count_outputs:
            inputs["return_num_input_tokens"] = _one(True, np.bool_)
            inputs["return_num_output_tokens"] = _one(True, np.bool_)
        return inputs

    def requested_outputs(self, request: GenerationRequest) -> list[str]:
        outputs = ["text_output"]
        if self.options.token_count_outputs:
            outputs += ["num_input_tokens", "num_output_tokens"]
        return outputs

    def parse(self, outputs: dict[str, np.ndarray]) -> GenerationOutput:
        out = GenerationOutput()
        text = outputs.get("text_output")
        if text is not None and text.size:
            out.text = "".join(element_text(value) for value in text.reshape(-1))
        out.prompt_tokens = first_int(outputs.get("num_input_tokens"))
        out.completion_tokens = first_int(outputs.get("num_output_tokens")) or 0
        return out

    def decoder(self, request: GenerationRequest) -> Decoder:
        return TrtllmDecoder(self, request)


class TensorRtLlmFormat(_TensorRtLlmBase):
    """NVIDIA's `tensorrt_llm` model (the C++ TensorRT-LLM backend), with token ids."""

    name = "tensorrt_llm"
    top_k_input = "runtime_top_k"
    top_p_input = "runtime_top_p"
    stop_input = "stop_words_list"

    def image_refusal(self) -> str | None:
        return ("the tensorrt_llm model takes token ids; image features would have to come from a separate "
                "vision-encoder model as a prompt table, which this request format does not drive; serve vision "
                "models on Triton's vLLM backend (request_format vllm)")

    def check(self, request: GenerationRequest) -> None:
        super().check(request)
        if self.options.tokenizer is None:
            raise BadRequestError("The tensorrt_llm request format needs a tokenizer.")
        if request.logprobs:
            raise BadRequestError("'top_logprobs' is not supported by TensorRT-LLM (only the chosen token's).", param="top_logprobs")

    def _end_id(self) -> int | None:
        if self.options.end_id is not None:
            return self.options.end_id
        return getattr(self.options.tokenizer, "eos_token_id", None)

    def inputs(self, request: GenerationRequest) -> dict[str, np.ndarray]:
        tokenizer = self.options.tokenizer
        ids = list(request.prompt_token_ids) if request.prompt_token_ids is not None else tokenizer(request.prompt).input_ids
        inputs = {
            "input_ids": np.array([ids], dtype=np.int32),
            "input_lengths": _one(len(ids), np.int32),
            "request_output_len": _one(request.max_tokens, np.int32),
            "streaming": _one(request.stream, np.bool_),
            **self._common_inputs(request),
        }
        end_id = self._end_id()
        if end_id is not None:
            inputs.setdefault("end_id", _one(end_id, np.int32))
            pad_id = getattr(tokenizer, "pad_token_id", None)
            inputs.setdefault("pad_id", _one(pad_id if pad_id is not None else end_id, np.int32))
        words = [tokenizer(stop, add_special_tokens=False).input_ids for stop in request.sampling.get("stop") or []]
        words += [[token] for token in self.stop_token_ids(request)]
        if words and self.options.takes("stop_words_list"):
            inputs["stop_words_list"] = stop_words_list(words)
        if request.logprobs is not None:
            inputs["return_log_probs"] = _one(True, np.bool_)
        return inputs

    def stop_token_ids(self, request: GenerationRequest) -> list[int]:
        """The request's stop token ids, then the extra EOS ids: the engine takes one `end_id`."""
        ids = list(request.sampling.get("stop_token_ids") or [])
        return ids + [token for token in self.extra_eos_ids() if token not in ids]

    def requested_outputs(self, request: GenerationRequest) -> list[str]:
        outputs = ["output_ids", "sequence_length"]
        if request.logprobs is not None:
            outputs.append("output_log_probs")
        return outputs

    def decoder(self, request: GenerationRequest) -> Decoder:
        return TensorRtLlmDecoder(self, request)


def stop_words_list(words: list[list[int]]) -> np.ndarray:
    """TensorRT-LLM's stop words tensor, [1, 2, L]: the words' ids concatenated, then the
    cumulative end offset of each word, padded with -1."""
    flat = [token for word in words for token in word]
    offsets, end = [], 0
    for word in words:
        end += len(word)
        offsets.append(end)
    width = max(len(flat), len(offsets))
    rows = [flat + [-1] * (width - len(flat)), offsets + [-1] * (width - len(offsets))]
    return np.array([rows], dtype=np.int32)
