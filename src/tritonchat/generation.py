"""From a validated chat request and its prompt to what the generation model is asked to do."""

from __future__ import annotations

from dataclasses import dataclass

from .backends import GenerationRequest
from .errors import BadRequestError
from .protocol import ChatCompletionRequest
from .template import Prompt

# OpenAI request fields that map one-to-one onto vLLM SamplingParams of the same name.
_SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop_token_ids",
    "min_tokens",
    "ignore_eos",
)


@dataclass(frozen=True)
class Limits:
    context_length: int  # prompt + completion tokens the model can hold; 0 if unknown
    default_max_tokens: int = 0  # used when the request sets none; 0 = whatever fits


def refuse_unsupported(request: ChatCompletionRequest, trust_request_chat_template: bool = False) -> None:
    """Refuse, with a 400 naming the field, what this server cannot honour yet."""
    if request.n not in (None, 1):
        raise BadRequestError("'n' greater than 1 is not supported.", param="n")
    if request.logprobs or request.top_logprobs:
        raise BadRequestError("'logprobs' is not supported.", param="logprobs")
    if request.response_format is not None and request.response_format.type != "text":
        raise BadRequestError(
            f"'response_format' of type {request.response_format.type!r} is not supported.", param="response_format"
        )
    if request.tools and request.tool_choice != "none":
        raise BadRequestError("Tool calling is not supported; send 'tool_choice': 'none' or no tools.", param="tools")
    if request.tool_choice not in (None, "none"):
        raise BadRequestError("'tool_choice' other than 'none' is not supported.", param="tool_choice")
    if request.chat_template is not None and not trust_request_chat_template:
        raise BadRequestError("A per-request 'chat_template' is not allowed by this server.", param="chat_template")
    if request.stream_options is not None and not request.is_stream:
        raise BadRequestError("'stream_options' is only allowed when 'stream' is true.", param="stream_options")
    if request.stream_options is not None and request.stream_options.continuous_usage_stats:
        raise BadRequestError("'continuous_usage_stats' is not supported.", param="stream_options")


def max_tokens_for(request: ChatCompletionRequest, prompt: Prompt, limits: Limits) -> int:
    """The completion budget: what was asked, else the configured default, else what fits."""
    asked = request.requested_max_tokens
    param = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
    if limits.context_length:
        room = limits.context_length - prompt.num_tokens
        if room <= 0:
            raise BadRequestError(
                f"This model's maximum context length is {limits.context_length} tokens, but the messages "
                f"take {prompt.num_tokens} tokens. Please shorten the messages.",
                param="messages",
                code="context_length_exceeded",
            )
        if asked is not None and asked > room:
            raise BadRequestError(
                f"This model's maximum context length is {limits.context_length} tokens. However, you "
                f"requested {prompt.num_tokens + asked} tokens ({prompt.num_tokens} in the messages, {asked} "
                f"in the completion). Please reduce the length of the messages or completion.",
                param=param,
                code="context_length_exceeded",
            )
    if asked is not None:
        return asked
    if limits.default_max_tokens:
        return min(limits.default_max_tokens, room) if limits.context_length else limits.default_max_tokens
    if limits.context_length:
        return room
    raise BadRequestError("Set 'max_completion_tokens': this model's context length is unknown.", param=param)


def sampling_for(request: ChatCompletionRequest) -> dict:
    sampling = {name: getattr(request, name) for name in _SAMPLING_FIELDS if getattr(request, name) is not None}
    if request.stop is not None:
        sampling["stop"] = [request.stop] if isinstance(request.stop, str) else list(request.stop)
    if request.logit_bias:
        sampling["logit_bias"] = {int(token): bias for token, bias in request.logit_bias.items()}
    return sampling


def plan_generation(request: ChatCompletionRequest, prompt: Prompt, limits: Limits) -> GenerationRequest:
    return GenerationRequest(
        prompt=prompt.text,
        prompt_tokens=prompt.num_tokens,
        max_tokens=max_tokens_for(request, prompt, limits),
        stream=request.is_stream,
        sampling=sampling_for(request),
    )
