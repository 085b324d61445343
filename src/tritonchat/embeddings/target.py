"""The embedding interface of Triton's vLLM backend (release 25.11 and later), one request per
input:

    text_input                STRING [1]   "" (required by the backend's config, unused for embeddings)
    embedding_request         STRING [1]   {"input": <text or token ids>, "pooling_params": {}} or,
                                           with `dimensions`, {"pooling_params": {"dimensions": [N]}}
    return_num_input_tokens   BOOL [1]     true
    return_num_output_tokens  BOOL [1]     true

The backend chooses the engine's `embed` task because `embedding_request` is present (a model
whose engine has no `embed` task answers "Model <name> does not support 'embed' request"), runs
the engine's `encode`, and answers with one response and FINAL: `text_output` [1] the vector as
a JSON list of floats, `num_input_tokens` the prompt's length, `num_output_tokens` 0 (both 0-d
UINT32). It reads only `dimensions` of the pooling parameters (the first element of the list,
as Triton's OpenAI frontend sends it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..errors import InternalError
from ..formats import GenerationOutput, RequestFormat
from ..formats.base import first_int, first_text, string_tensor

INPUT = "embedding_request"
OUTPUTS = ["text_output", "num_input_tokens", "num_output_tokens"]
_TRUE = np.array([True])


@dataclass(frozen=True)
class EmbeddingInput:
    """One embedding to ask the backend for: a text, or token ids."""

    input: str | list[int]
    dimensions: int | None = None


class VllmEmbeddingFormat(RequestFormat):
    """Triton's vLLM backend's `embedding_request` (no finish reason: one response per input)."""

    name = "vllm"
    reports_finish_reason = False

    def check_target(self) -> None:
        """Whether the target has the embedding input (known once its configuration was read)."""
        if not self.options.takes(INPUT):
            raise InternalError(
                f"The generation model {self.options.target_model!r} has no input {INPUT!r}: embeddings need "
                "Triton's vLLM backend from release 25.11.")

    def embedding_request(self, item: EmbeddingInput) -> str:
        pooling = {"dimensions": [item.dimensions]} if item.dimensions is not None else {}
        return json.dumps({"input": item.input, "pooling_params": pooling}, ensure_ascii=False)

    def inputs(self, item: EmbeddingInput) -> dict[str, np.ndarray]:
        return {
            "text_input": string_tensor(""),
            INPUT: string_tensor(self.embedding_request(item)),
            "return_num_input_tokens": _TRUE,
            "return_num_output_tokens": _TRUE,
        }

    def requested_outputs(self, item: EmbeddingInput) -> list[str]:
        return list(OUTPUTS)

    def parse(self, outputs: dict[str, np.ndarray]) -> GenerationOutput:
        return GenerationOutput(text=first_text(outputs.get("text_output")) or "",
                                prompt_tokens=first_int(outputs.get("num_input_tokens")))
