"""Request format of Triton's vLLM backend (`backend: "vllm"`).

Tensors have no batch dimension (`max_batch_size: 0`). Sampling settings travel as one
JSON string in `sampling_parameters`. With `exclude_input_in_output` and streaming, every
response carries only the text generated since the previous one; `num_output_tokens` is
likewise a delta, `num_input_tokens` the prompt length.
"""

from __future__ import annotations

import base64
import json

import numpy as np

from ..errors import BadRequestError, InternalError
from .base import GenerationOutput, GenerationRequest, RequestFormat, TokenLogprob, element_text, string_tensor

_OUTPUTS = ["text_output", "finish_reason", "num_input_tokens", "num_output_tokens"]
# Inputs every request sends; the backend has them from Triton 24.12.
_REQUIRED_INPUTS = ("exclude_input_in_output", "return_finish_reason", "return_num_input_tokens",
                    "return_num_output_tokens")
_TRUE = np.array([True])


def parse_logprobs(raw: str) -> list[TokenLogprob] | None:
    """The backend's `logprobs` element: a JSON list, per new token, of
    `{token_id: {"logprob", "rank", "decoded_token"}}` whose first entry is the sampled token."""
    entries = json.loads(raw)
    if entries is None:
        return None
    tokens = []
    for position in entries:
        items = [(int(token_id), v) for token_id, v in position.items()]
        sampled_id, sampled = items[0]
        top = sorted(
            ((token_id, v.get("decoded_token") or "", float(v["logprob"]), int(v.get("rank") or 0)) for token_id, v in items),
            key=lambda entry: entry[3],
        )
        tokens.append(
            TokenLogprob(
                token_id=sampled_id,
                token=sampled.get("decoded_token") or "",
                logprob=max(float(sampled["logprob"]), -9999.0),
                top=top,
            )
        )
    return tokens


class VllmFormat(RequestFormat):
    name = "vllm"
    reports_finish_reason = True

    def check(self, request: GenerationRequest) -> None:
        if "logit_bias" in request.sampling:
            # The backend builds SamplingParams from the JSON without vLLM's own conversion
            # (vllm_backend src/utils/vllm_backend_utils.py, TritonSamplingParams.from_dict),
            # so the token ids stay strings and the engine fails the request without a reason.
            raise BadRequestError(
                "'logit_bias' is not supported by Triton's vLLM backend: it passes the token ids to vLLM "
                "as JSON strings, which vLLM cannot use.", param="logit_bias")
        options = self.options
        lacking = [name for name in _REQUIRED_INPUTS if not options.takes(name)]
        if lacking:
            raise InternalError(
                f"The generation model {self.options.target_model!r} has no input {', '.join(map(repr, lacking))}: this needs "
                "Triton's vLLM backend from release 24.12.")
        if request.structured and not options.structured_outputs_key:
            raise BadRequestError(
                "Constrained generation (response_format, or a named or required tool_choice) needs Triton's vLLM "
                "backend from release 25.01; the generation model's release has none.", param="response_format")
        if request.images and (reason := self.image_refusal()):
            raise BadRequestError(f"Images are not supported here: {reason}.", param="messages")
        if request.logprobs is not None and not options.takes("return_logprobs"):
            raise BadRequestError(
                f"The generation model {self.options.target_model!r} takes no input for log probabilities.", param="logprobs")

    def image_refusal(self) -> str | None:
        if self.options.takes("image"):
            return None
        return (f"this generation model takes no images: {self.options.target_model!r} has no 'image' input "
                "(Triton's vLLM backend has it from release 25.01; 24.12 declares it only with a newer vLLM than it ships)")

    def sampling_parameters(self, request: GenerationRequest) -> dict:
        params = {"max_tokens": request.max_tokens, **request.sampling}
        if request.lora_name:
            params["lora_name"] = request.lora_name
        if request.logprobs is not None:
            params["logprobs"] = request.logprobs
        if request.structured:
            # The backend expects the constraint as a JSON string inside the JSON.
            params[self.structured_outputs_key] = json.dumps(request.structured)
        return params

    def inputs(self, request: GenerationRequest) -> dict[str, np.ndarray]:
        inputs = {
            "text_input": string_tensor(request.prompt),
            "stream": np.array([request.stream or self.options.stream_whole]),
            "exclude_input_in_output": _TRUE,
            "sampling_parameters": string_tensor(json.dumps(self.sampling_parameters(request))),
            "return_finish_reason": _TRUE,
            "return_num_input_tokens": _TRUE,
            "return_num_output_tokens": _TRUE,
        }
        if request.logprobs is not None:
            inputs["return_logprobs"] = _TRUE
        if request.images:
            # One element per image: the base64 of its file, which the backend decodes with Pillow.
            inputs["image"] = np.array([base64.b64encode(data) for data in request.images], dtype=np.object_)
        return inputs

    def requested_outputs(self, request: GenerationRequest) -> list[str]:
        return list(_OUTPUTS) + (["logprobs"] if request.logprobs is not None else [])

    def parse(self, outputs: dict[str, np.ndarray]) -> GenerationOutput:
        out = GenerationOutput()
        text = outputs.get("text_output")
        if text is not None and text.size:
            out.text = element_text(text.reshape(-1)[0])
        reason = outputs.get("finish_reason")
        if reason is not None and reason.size:
            value = element_text(reason.reshape(-1)[0])
            out.finish_reason = None if value in ("None", "") else value
        prompt = outputs.get("num_input_tokens")
        if prompt is not None and prompt.size:
            out.prompt_tokens = int(prompt.reshape(-1)[0])
        completion = outputs.get("num_output_tokens")
        if completion is not None and completion.size:
            out.completion_tokens = int(completion.reshape(-1)[0])
        logprobs = outputs.get("logprobs")
        if logprobs is not None and logprobs.size:
            out.logprobs = parse_logprobs(element_text(logprobs.reshape(-1)[0]))
        return out
