"""From a validated request and its prompt to what the generation model is asked to do."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .formats import GenerationRequest
from .errors import BadRequestError, NotFoundError
from .protocol import INT64_MAX, INT64_MIN, ChatCompletionRequest, CompletionRequest, _GenerationFields
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


@dataclass(frozen=True)
class ModelNames:
    """The names clients may put in `model`: the served name, and `<served><sep><adapter>` for LoRA."""

    served: str
    lora_separator: str = ""
    lora_adapters: tuple[str, ...] = ()

    def resolve(self, requested: str | None) -> str | None:
        """The LoRA adapter a request's `model` selects (None: the base model), or 404."""
        if not requested or requested == self.served:
            return None
        if self.lora_separator:
            prefix = self.served + self.lora_separator
            if requested.startswith(prefix):
                adapter = requested[len(prefix) :]
                if adapter in self.lora_adapters:
                    return adapter
                known = ", ".join(self.served + self.lora_separator + a for a in self.lora_adapters) or "none"
                raise NotFoundError(f"The LoRA adapter {adapter!r} does not exist; this server has: {known}.")
        raise NotFoundError(f"The model {requested!r} does not exist; this server serves {self.served!r}.")


def check_chat_request(request: ChatCompletionRequest, *, trust_request_chat_template: bool = False) -> None:
    """Cross-field rules and what this server refuses, each a 400 naming the field."""
    _check_common(request)
    if request.top_logprobs and not request.logprobs:
        raise BadRequestError("'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs")
    if request.chat_template is not None and not trust_request_chat_template:
        raise BadRequestError(
            "A per-request 'chat_template' is not allowed by this server (see its 'trust_request_chat_template').",
            param="chat_template",
        )


def check_completion_request(request: CompletionRequest) -> None:
    _check_common(request)
    if not isinstance(request.prompt, str):
        raise BadRequestError("'prompt' must be a single string; lists of prompts are not supported.", param="prompt")
    if request.prompt == "":
        raise BadRequestError("'prompt' must not be empty.", param="prompt")
    if request.suffix:
        raise BadRequestError("'suffix' is not supported.", param="suffix")
    if request.best_of is not None and request.best_of != request.choices:
        raise BadRequestError("'best_of' other than 'n' is not supported.", param="best_of")
    if request.echo and request.logprobs is not None:
        raise BadRequestError("'echo' together with 'logprobs' is not supported.", param="echo")


def _check_common(request: _GenerationFields) -> None:
    if request.stream_options is not None and not request.is_stream:
        raise BadRequestError("'stream_options' is only allowed when 'stream' is true.", param="stream_options")


def max_tokens_for(request: _GenerationFields, prompt: Prompt, limits: Limits) -> int:
    """The completion budget: what was asked, else the configured default, else what fits."""
    asked = request.requested_max_tokens
    param = "max_completion_tokens" if getattr(request, "max_completion_tokens", None) is not None else "max_tokens"
    room = limits.context_length - prompt.num_tokens
    if limits.context_length:
        if room <= 0:
            raise BadRequestError(
                f"This model's maximum context length is {limits.context_length} tokens, but the prompt "
                f"takes {prompt.num_tokens} tokens. Please shorten the prompt.",
                param="messages" if isinstance(request, ChatCompletionRequest) else "prompt",
                code="context_length_exceeded",
            )
        if asked is not None and asked > room:
            raise BadRequestError(
                f"This model's maximum context length is {limits.context_length} tokens. However, you "
                f"requested {prompt.num_tokens + asked} tokens ({prompt.num_tokens} in the prompt, {asked} "
                f"in the completion). Please reduce the length of the prompt or completion.",
                param=param,
                code="context_length_exceeded",
            )
    if asked is not None:
        return asked
    if limits.default_max_tokens:
        return min(limits.default_max_tokens, room) if limits.context_length else limits.default_max_tokens
    if limits.context_length:
        return room
    raise BadRequestError(f"Set '{param}': this model's context length is unknown.", param=param)


def sampling_for(request: _GenerationFields) -> dict:
    sampling = {name: getattr(request, name) for name in _SAMPLING_FIELDS if getattr(request, name) is not None}
    if request.stop is not None:
        sampling["stop"] = [request.stop] if isinstance(request.stop, str) else list(request.stop)
    if request.logit_bias:
        sampling["logit_bias"] = {int(token): bias for token, bias in request.logit_bias.items()}
    return sampling


def structured_output_for(request: _GenerationFields) -> dict | None:
    """`response_format` as a vLLM structured-output constraint."""
    response_format = request.response_format
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return {"json_object": True}
    schema = response_format.json_schema.schema_
    return {"json": schema if schema is not None else {}}


def plan_generations(
    request: _GenerationFields,
    prompt: Prompt,
    limits: Limits,
    lora_name: str | None = None,
    structured: dict | None = None,
    extra_sampling: dict | None = None,
) -> list[GenerationRequest]:
    """One generation per choice. With a seed, choice i uses seed + i, so choices differ but
    the whole response stays reproducible. `structured` (from tool_choice) overrides
    `response_format`."""
    base = GenerationRequest(
        prompt=prompt.text,
        prompt_tokens=prompt.num_tokens,
        prompt_token_ids=prompt.token_ids,
        max_tokens=max_tokens_for(request, prompt, limits),
        stream=request.is_stream,
        sampling={**sampling_for(request), **(extra_sampling or {})},
        lora_name=lora_name,
        logprobs=request.top_logprobs_count,
        structured=structured or structured_output_for(request),
    )
    generations = [base]
    for i in range(1, request.choices):
        sampling = dict(base.sampling)
        if "seed" in sampling:
            sampling["seed"] = _wrap_int64(sampling["seed"] + i)
        generations.append(replace(base, sampling=sampling))
    return generations


def _wrap_int64(value: int) -> int:
    if value > INT64_MAX:
        return INT64_MIN + (value - INT64_MAX - 1)
    return value
