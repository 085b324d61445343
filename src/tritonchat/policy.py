"""What a server's settings and its model's files allow, checked apart from any request's
pipeline: the caps on a request (`max_*`), whether images may come at all, parsers that need
special tokens, and the facts read from the model's files (EOS ids, context length)."""

from __future__ import annotations

from .errors import BadRequestError
from .images import model_has_vision
from .parsers import get_reasoning_parser, get_tool_parser
from .protocol import ChatCompletionRequest, CompletionRequest
from .repository import config_context_length, generation_eos_ids
from .settings import Settings


def check_body_size(settings: Settings, body: str | bytes) -> None:
    """A request body larger than `max_request_bytes`: a 400 saying so, before it is parsed."""
    if len(body) > settings.max_request_bytes:
        raise BadRequestError(
            f"The request body has {len(body)} bytes; this server takes at most "
            f"{settings.max_request_bytes} (max_request_bytes)."
        )


def check_limits(settings: Settings, request) -> None:
    """The server's caps (settings `max_*`), each a 400 naming the field and the cap."""
    chat = isinstance(request, ChatCompletionRequest)
    budget_param = "max_completion_tokens" if getattr(request, "max_completion_tokens", None) else "max_tokens"
    caps = [
        ("n", request.choices, settings.max_n, "max_n", "choices"),
        (budget_param, request.requested_max_tokens or 0, settings.max_completion_tokens_limit,
         "max_completion_tokens_limit", "tokens"),
        ("logit_bias", len(request.logit_bias or {}), settings.max_logit_bias, "max_logit_bias", "entries"),
        ("messages" if chat else "prompt", content_chars(request), settings.max_content_chars,
         "max_content_chars", "characters"),
    ]
    if chat:
        caps += [
            ("messages", len(request.messages), settings.max_messages, "max_messages", "messages"),
            ("tools", len(request.tools or []), settings.max_tools, "max_tools", "tools"),
        ]
    for param, value, cap, name, unit in caps:
        if cap and value > cap:
            raise BadRequestError(
                f"'{param}' asks for {value} {unit}; this server allows at most {cap} ({name}).", param=param
            )


def content_chars(request) -> int:
    """Characters of all message contents (chat) or of the prompt (completions)."""
    if isinstance(request, CompletionRequest):
        return len(request.prompt) if isinstance(request.prompt, str) else 0
    total = 0
    for message in request.messages:
        content = message.content
        if isinstance(content, str):
            total += len(content)
        elif content:
            total += sum(len(getattr(part, "text", "")) for part in content)
    return total


def image_rule(settings: Settings) -> str | None:
    """Why this server refuses images whatever the generation model (setting `image_inputs`), or None."""
    if settings.image_inputs == "false":
        return "this server takes no images (image_inputs false)"
    if settings.image_inputs == "auto" and model_has_vision(settings.tokenizer) is False:
        return ("the model is text-only: its config.json has no vision part (vision_config, ...); set image_inputs "
                "true if it does take images")
    return None


def check_special_tokens(settings: Settings) -> None:
    """Refuse a parser whose markers are special tokens (Mistral's [TOOL_CALLS], Harmony's
    channels) on a target that drops them: an ensemble whose postprocessing skips them, or
    TensorRT-LLM's LLM API model (no input for it); nothing would ever be found. The vLLM and
    `tensorrt_llm` formats keep them per request."""
    needing = [(key, name) for key, name, lookup in (
        ("tool_call_parser", settings.tool_call_parser, get_tool_parser),
        ("reasoning_parser", settings.reasoning_parser, get_reasoning_parser),
    ) if name and lookup(name).needs_special_tokens]
    if not needing:
        return
    key, name = needing[0]
    if settings.request_format == "llmapi":
        raise ValueError(
            f"{key} {name!r} needs special tokens in the generated text, and "
            "TensorRT-LLM's LLM API model drops them (it has no skip_special_tokens input).")
    if settings.request_format == "trtllm" and settings.trtllm_skip_special_tokens:
        raise ValueError(
            f"{key} {name!r} needs special tokens in the generated text, and the "
            "ensemble's postprocessing model drops them (its skip_special_tokens parameter, true by default). Set "
            "skip_special_tokens to false in the postprocessing config.pbtxt and trtllm_skip_special_tokens to false "
            "here, or use request_format tensorrt_llm.")


def eos_token_ids(tokenizer_path: str, tokenizer) -> tuple[int, ...]:
    """generation_config.json's EOS ids, then the tokenizer's, without repeats."""
    ids = generation_eos_ids(tokenizer_path)
    own = getattr(tokenizer, "eos_token_id", None)
    return tuple(dict.fromkeys(ids + ([own] if isinstance(own, int) else [])))


def context_length(tokenizer_path: str, tokenizer) -> int:
    """The model's context length from its config.json, else the tokenizer's limit, else 0."""
    value = config_context_length(tokenizer_path)
    if value:
        return value
    limit = getattr(tokenizer, "model_max_length", 0) or 0
    return int(limit) if 0 < limit < 10**8 else 0
