"""OpenAI's embeddings request (`POST /v1/embeddings`), validated strictly, with vLLM's extra
fields (`EmbeddingCompletionRequest` of vLLM 0.32) honoured or refused by name.

    input            a string, a list of strings, a list of token ids, or a list of lists of
                     token ids; none empty, at most MAX_INPUTS items (OpenAI's limit)
    encoding_format  "float" (default) or "base64" (the vector's bytes; little-endian float32
                     unless `embed_dtype` / `endianness` say otherwise, as vLLM encodes them)
    dimensions       a Matryoshka size (checked against the model in the service, as vLLM does)
    user             accepted (no effect)

vLLM's extras: `add_special_tokens`, `truncate_prompt_tokens`, `truncation_side`, `embed_dtype`
(float32, float16, bfloat16) and `endianness` are carried out here; `request_id`, `priority` and
`cache_salt` are accepted and change nothing (as for the chat models); `use_activation` only at
its default (true). What Triton's vLLM backend cannot carry (it takes only the input and
`dimensions`) or this server does not serve is a 400 naming the field: `use_activation: false`,
`padding: max_length`, `mm_processor_kwargs`, `embed_dtype` fp8, the binary encodings `bytes` /
`bytes_only`, and chat-style input (`messages`). `normalize` and removed `task` values are
refused as vLLM refuses them. Fields neither OpenAI nor vLLM knows are ignored.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from ..errors import BadRequestError
from .known import Rule
from .parts import _Strict
from .requests import parse_request

# OpenAI's limit on the inputs of one request.
MAX_INPUTS = 2048

TokenIds = list[Annotated[StrictInt, Field(ge=0)]]

# vLLM's fields this server does not carry out, accepted only at their no-op value.
KNOWN: dict[str, Rule] = {
    "use_activation": ((True,), "Triton's vLLM backend always applies the pooler's activation (normalizes)"),
    "padding": (("do_not_pad",), "padding prompts to the maximum length is not supported"),
    "mm_processor_kwargs": ((), "multimodal input is not supported"),
    "messages": ((), "chat-style embedding input is not supported; send 'input'"),
}

# What vLLM answers for fields it removed (vllm.entrypoints.pooling.base.protocol).
REMOVED = {
    "normalize": "Parameter `normalize` was removed; use `use_activation` instead.",
}


class EmbeddingRequest(_Strict):
    model: str | None = None
    input: str | list[str] | TokenIds | list[TokenIds]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[StrictInt, Field(ge=1)] | None = None
    user: str | None = None
    # vLLM's extras
    add_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[StrictInt, Field(ge=-1)] | None = None
    truncation_side: Literal["left", "right"] | None = None
    embed_dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    endianness: Literal["native", "big", "little"] = "native"

    @model_validator(mode="before")
    @classmethod
    def _refused_first(cls, data):
        """What vLLM refuses before it validates, and values this server does not serve, named."""
        if isinstance(data, dict):
            _refuse_removed(data)
        return data

    @field_validator("input")
    @classmethod
    def _not_empty(cls, value):
        if isinstance(value, str):
            if not value:
                raise ValueError("the input must not be an empty string")
            return value
        if not value:
            raise ValueError("the input must not be an empty list")
        if len(value) > MAX_INPUTS:
            raise ValueError(f"at most {MAX_INPUTS} inputs per request, got {len(value)}")
        for index, item in enumerate(value):
            if isinstance(item, (str, list)) and not item:
                raise ValueError(f"input [{index}] is empty")
        return value

    @property
    def inputs(self) -> list[str | list[int]]:
        """One item per embedding asked for, in order: a text or its token ids."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if isinstance(value[0], int):
            return [list(value)]
        return list(value)


def _refuse_removed(data: dict) -> None:
    for name, message in REMOVED.items():
        if name in data:
            raise BadRequestError(message, param=name)
    task = data.get("task")
    if task is not None and task != "embed":
        raise BadRequestError(f"'task' {task!r} is not an embedding task; this endpoint serves 'embed'.",
                              param="task")
    if data.get("encoding_format") in ("bytes", "bytes_only"):
        raise BadRequestError(
            f"'encoding_format' {data['encoding_format']!r} is not supported by this server: the answer is JSON; "
            "use 'float' or 'base64'.", param="encoding_format")
    if isinstance(data.get("embed_dtype"), str) and data["embed_dtype"].startswith("fp8"):
        raise BadRequestError(
            f"'embed_dtype' {data['embed_dtype']!r} is not supported by this server: use float32, float16 or bfloat16.",
            param="embed_dtype")


def parse_embedding_request(body: str | bytes) -> EmbeddingRequest:
    """Parse and validate an embeddings request body, or raise `BadRequestError` naming the field."""
    return parse_request(body, EmbeddingRequest, KNOWN)
