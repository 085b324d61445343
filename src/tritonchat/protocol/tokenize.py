"""vLLM's `/tokenize` and `/detokenize` requests, as the chat and completions models take them: a
request body whose `endpoint` field says `tokenize` or `detokenize` (the gateway adds it for its
routes of those names) is answered from the model's tokenizer, without the generation model.

    {"endpoint": "tokenize", "prompt": "...", "add_special_tokens": true, "return_token_strs": false}
    {"endpoint": "tokenize", "messages": [...], "add_generation_prompt": true, "tools": [...], ...}
    {"endpoint": "detokenize", "tokens": [1, 2, 3]}
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError, field_validator

from ..errors import BadRequestError
from .parts import _Strict
from .validation import validation_error

ENDPOINTS = ("tokenize", "detokenize")
# Fields of a chat tokenize request that go to the chat request it is rendered as.
CHAT_FIELDS = ("model", "messages", "tools", "chat_template", "chat_template_kwargs", "add_generation_prompt",
               "continue_final_message", "documents", "reasoning_effort")


class TokenizePrompt(_Strict):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class TokenizeChat(_Strict):
    model: str | None = None
    messages: list[Any]
    add_special_tokens: bool = False
    return_token_strs: bool = False


class Detokenize(_Strict):
    model: str | None = None
    tokens: list[int]

    @field_validator("tokens")
    @classmethod
    def _not_negative(cls, value: list[int]) -> list[int]:
        if any(token < 0 for token in value):
            raise ValueError("token ids are not negative")
        return value


def endpoint_of(body: str | bytes) -> tuple[str, dict] | None:
    """(`tokenize` or `detokenize`, the request) when the body asks for one of them, else None
    (a cheap look first: only bodies that mention `endpoint` are parsed here)."""
    if b'"endpoint"' not in (body if isinstance(body, bytes) else body.encode("utf-8", errors="replace")):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None  # the normal parse answers the 400
    if not isinstance(data, dict) or data.get("endpoint") not in ENDPOINTS:
        return None
    data = dict(data)
    return data.pop("endpoint"), data


def parse_tokenize(data: dict) -> TokenizePrompt | TokenizeChat:
    if "messages" in data and "prompt" in data:
        raise BadRequestError("Send either 'prompt' or 'messages', not both.", param="messages")
    model = TokenizeChat if "messages" in data else TokenizePrompt
    try:
        return model.model_validate({key: value for key, value in data.items()
                                     if key in model.model_fields})
    except ValidationError as exc:
        raise validation_error(exc) from None


def parse_detokenize(data: dict) -> Detokenize:
    try:
        return Detokenize.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
