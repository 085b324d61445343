"""Request fields of OpenAI's and vLLM's schemas that this server does not carry out.

Every field either schema knows is honoured or refused, never silently dropped: a field below
is accepted only at its no-op value (absent, null, or the value that changes nothing, such as
`use_beam_search: false`), and otherwise answered with a 400 naming it. Fields that change no
output (caching and routing hints, ids for the caller's own records) are accepted and ignored.
`tests/unit/test_protocol.py` checks that every field of the installed `openai` and `vllm`
request schemas is either a field of our request models or listed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import BadRequestError

# What accepting a field at a value takes: None, or one of `values`.
Rule = tuple[tuple[Any, ...], str]

# Accepted whatever their value: they change nothing in the output.
IGNORED = frozenset({
    "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "safety_identifier", "cache_salt",
    "session_id", "request_id", "priority",
})

_SHARED: dict[str, Rule] = {
    "use_beam_search": ((False,), "beam search is not supported"),
    "length_penalty": ((1, 1.0), "'length_penalty' applies to beam search, which is not supported"),
    "prompt_logprobs": ((), "prompt log probabilities are not supported"),
    "logprob_token_ids": ((), "log probabilities of chosen token ids are not supported"),
    "return_token_ids": ((False,), "token ids in the response are not supported"),
    "return_token_offsets": ((False,), "token offsets in the response are not supported"),
    "return_tokens_as_token_ids": ((False,), "tokens as token ids are not supported"),
    "truncate_prompt_tokens": ((), "prompt truncation is not supported; shorten the prompt"),
    "truncation_side": ((), "prompt truncation is not supported"),
    "thinking_token_budget": ((), "a thinking token budget is not supported"),
    "repetition_detection": ((), "repetition detection is not supported"),
    "vllm_xargs": ((), "'vllm_xargs' is not supported"),
    "kv_transfer_params": ((), "KV transfer is not supported"),
    "ec_transfer_params": ((), "encoder-cache transfer is not supported"),
    "watermarking": ((), "watermarking is not supported"),
    "routed_experts_prompt_start": ((), "'routed_experts_prompt_start' is not supported"),
    "mm_payload": ((), "multimodal input is not supported"),
    "return_mm_kwargs": ((False,), "multimodal kwargs in the response are not supported"),
    "guided_decoding_backend": ((), "'guided_decoding_backend' is not supported"),
    "guided_whitespace_pattern": ((), "'guided_whitespace_pattern' is not supported"),
}

CHAT: dict[str, Rule] = {
    **_SHARED,
    "add_special_tokens": ((False,), "adding special tokens to a rendered chat prompt is not supported"),
    "return_prompt_text": ((False,), "the prompt text in the response is not supported"),
    "media_io_kwargs": ((), "multimodal input is not supported"),
    "mm_processor_kwargs": ((), "multimodal input is not supported"),
    "audio": ((), "audio output is not supported"),
    "modalities": ((["text"],), "only the 'text' modality is supported"),
    "prediction": ((), "predicted outputs are not supported"),
    "verbosity": ((), "'verbosity' is not supported"),
    "web_search_options": ((), "web search is not supported"),
    "moderation": ((), "moderation is not supported"),
    "functions": ((), "'functions' is deprecated and not supported; use 'tools'"),
    "function_call": ((), "'function_call' is deprecated and not supported; use 'tool_choice'"),
}

COMPLETION: dict[str, Rule] = {
    **_SHARED,
    "add_special_tokens": ((True,), "a prompt without the tokenizer's special tokens is not supported"),
    "prompt_embeds": ((), "prompt embeddings are not supported"),
}


def check_known(data: dict, rules: dict[str, Rule], declared: Callable[[str], bool]) -> None:
    """400 for a field of `rules` set to anything but its no-op value."""
    for name, value in data.items():
        if name in IGNORED or declared(name) or name not in rules:
            continue
        allowed, reason = rules[name]
        # `type(...) is` so that `true` is not taken for 1; 1 and 1.0 are both listed where both mean it.
        if value is None or any(value == ok and type(value) is type(ok) for ok in allowed):
            continue
        raise BadRequestError(f"'{name}' is not supported by this server: {reason}.", param=name)
