"""The vectors the backend returns -> OpenAI's embeddings response:

    {"id": "embd-...", "object": "list", "created": ..., "model": ...,
     "data": [{"index": i, "object": "embedding", "embedding": [...] or "<base64>"}, ...],
     "usage": {"prompt_tokens": N, "total_tokens": N}}

as vLLM's server answers (OpenAI's has no `id` / `created`, which the `openai` SDK ignores;
vLLM's usage also says `completion_tokens: 0`, which OpenAI's does not). A
`base64` embedding is the vector's bytes: float32 (or `embed_dtype` float16 / bfloat16, rounded
to nearest even as torch rounds), in the machine's byte order unless `endianness` says, as vLLM
encodes them (the `openai` SDK decodes little-endian float32, the default here).
"""

from __future__ import annotations

import base64
import json
import sys

import numpy as np

from ..chunks import ResponseBuilder, Usage
from ..errors import InternalError
from ..formats import GenerationOutput

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def to_bfloat16_bits(vector: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 bit patterns (uint16), rounded to nearest even."""
    bits = np.ascontiguousarray(vector, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def encode_base64(vector: list[float], embed_dtype: str = "float32", endianness: str = "native") -> str:
    """The vector's bytes in `embed_dtype` and `endianness`, base64 (vLLM's `base64` encoding)."""
    values = np.asarray(vector, dtype=np.float32)
    if embed_dtype == "float16":
        values = values.astype(np.float16)
    elif embed_dtype == "bfloat16":
        values = to_bfloat16_bits(values)
    if endianness != "native" and endianness != sys.byteorder:
        values = values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


class EmbeddingsBuilder(ResponseBuilder):
    """One embeddings response: one "choice" per input, each the backend's one response."""

    def __init__(self, *, encoding_format: str = "float", embed_dtype: str = "float32",
                 endianness: str = "native", **kwargs):
        super().__init__(**kwargs)
        self.encoding_format = encoding_format
        self.embed_dtype = embed_dtype
        self.endianness = endianness
        self.input_tokens = [0] * len(self.choices)

    def add_output(self, index: int, output: GenerationOutput) -> None:
        if output.text:
            self.choices[index].text.append(output.text)
        if output.prompt_tokens is not None:
            self.input_tokens[index] = output.prompt_tokens

    def usage(self) -> Usage:
        return Usage(sum(self.input_tokens), 0)

    def vector(self, index: int) -> list[float]:
        text = "".join(self.choices[index].text)
        try:
            vector = json.loads(text)
        except ValueError:
            vector = None
        if not isinstance(vector, list) or not all(isinstance(v, (int, float)) for v in vector):
            raise InternalError(f"The embedding model answered input {index} with no vector: {text[:80]!r}")
        return vector

    def embedding(self, index: int):
        vector = self.vector(index)
        if self.encoding_format == "base64":
            return encode_base64(vector, self.embed_dtype, self.endianness)
        return vector

    def completion(self) -> str:
        prompt_tokens = sum(self.input_tokens)
        return _dumps({
            "id": self.completion_id,
            "object": "list",
            "created": self.created,
            "model": self.model,
            "data": [{"index": index, "object": "embedding", "embedding": self.embedding(index)}
                     for index in range(len(self.choices))],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        })

    def stream_output(self, index: int, output: GenerationOutput) -> list[str]:
        raise InternalError("Embeddings are not streamed.")

    def stream_finish(self, index: int) -> list[str]:
        raise InternalError("Embeddings are not streamed.")
