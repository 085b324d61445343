"""From a validated request and its prompt to what the generation model is asked to do:
the served names, the token budget, sampling settings and one generation per choice."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .formats import GenerationRequest
from .errors import BadRequestError, NotFoundError
from .protocol import INT64_MAX, INT64_MIN, MAX_SCHEMA_NESTING, ChatCompletionRequest, GenerationFields, json_nesting
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
    "bad_words",
    "allowed_token_ids",
)
# vLLM sampling flags, sent only when they differ from vLLM's defaults (so that the
# TensorRT-LLM formats refuse only what would change the result).
_FLAG_DEFAULTS = {"include_stop_str_in_output": False, "skip_special_tokens": True, "spaces_between_special_tokens": True}


@dataclass(frozen=True)
class Limits:
    context_length: int  # prompt + completion tokens the model can hold; 0 if unknown
    default_max_tokens: int = 0  # used when the request sets none; 0 = whatever fits
    vocab_size: int = 0  # token ids the model has (config.json's `vocab_size`, as vLLM counts); 0 if unknown


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


def _budget_param(request: GenerationFields) -> str:
    return "max_completion_tokens" if getattr(request, "max_completion_tokens", None) is not None else "max_tokens"


def max_tokens_for(request: GenerationFields, prompt: Prompt, limits: Limits) -> int:
    """The completion budget: what was asked, else the configured default, else what fits."""
    asked = request.requested_max_tokens
    param = _budget_param(request)
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


def check_min_tokens(request: GenerationFields, max_tokens: int) -> None:
    """vLLM refuses a `min_tokens` above the budget (SamplingParams: min_tokens <= max_tokens)."""
    if request.min_tokens is None or request.min_tokens <= max_tokens:
        return
    if request.requested_max_tokens is not None:
        where = f"'{_budget_param(request)}' ({max_tokens})"
    else:
        where = f"this request's completion budget of {max_tokens} tokens (the default without 'max_tokens')"
    raise BadRequestError(f"'min_tokens' ({request.min_tokens}) must not be more than {where}.", param="min_tokens")


def check_token_ids(request: GenerationFields, vocab_size: int) -> None:
    """Token ids the engine refuses: those outside the model's vocabulary (when it is known)."""
    if not vocab_size:
        return
    fields = {
        "stop_token_ids": request.stop_token_ids or [],
        "allowed_token_ids": request.allowed_token_ids or [],
        "logit_bias": [int(token) for token in request.logit_bias or {}],
    }
    for name, ids in fields.items():
        outside = [token for token in ids if not 0 <= token < vocab_size]
        if outside:
            shown = ", ".join(map(str, outside[:5])) + (", ..." if len(outside) > 5 else "")
            raise BadRequestError(
                f"'{name}' holds token ids outside this model's vocabulary ({shown}); they go from 0 to "
                f"{vocab_size - 1}.", param=name)


def check_schema_nesting(request: GenerationFields, structured: dict | None, from_tools: bool) -> None:
    """vLLM refuses a JSON schema constraint nested more than MAX_SCHEMA_NESTING levels deep."""
    if not structured or not isinstance(structured.get("json"), (dict, list)):
        return
    if json_nesting(structured["json"]) <= MAX_SCHEMA_NESTING:
        return
    if from_tools:
        raise BadRequestError(
            f"The JSON schema that 'tool_choice' makes of 'tools' (a function's parameters inside the tool call's own "
            f"structure) nests objects and arrays more than {MAX_SCHEMA_NESTING} levels deep; at most "
            f"{MAX_SCHEMA_NESTING} are supported.", param="tools")
    param = request.constraint_field or "response_format"
    raise BadRequestError(
        f"The JSON schema in '{param}' nests objects and arrays more than {MAX_SCHEMA_NESTING} levels deep; at most "
        f"{MAX_SCHEMA_NESTING} are supported.", param=param)


def sampling_for(request: GenerationFields) -> dict:
    sampling = {name: getattr(request, name) for name in _SAMPLING_FIELDS if getattr(request, name) is not None}
    for name, default in _FLAG_DEFAULTS.items():
        value = getattr(request, name)
        if value is not None and value != default:
            sampling[name] = value
    if request.stop is not None:
        sampling["stop"] = [request.stop] if isinstance(request.stop, str) else list(request.stop)
    if request.logit_bias:
        sampling["logit_bias"] = {int(token): bias for token, bias in request.logit_bias.items()}
    return sampling


def structured_output_for(request: GenerationFields) -> dict | None:
    """`response_format`, `structured_outputs` or a `guided_*` field as a vLLM structured-output
    constraint (at most one is set: the protocol checks that)."""
    if request.structured_outputs is not None:
        return request.structured_outputs.constraint()
    if request.guided_json is not None:  # a string was parsed by the protocol
        return {"json": request.guided_json}
    for name, key in (("guided_regex", "regex"), ("guided_choice", "choice"), ("guided_grammar", "grammar")):
        if getattr(request, name) is not None:
            return {key: getattr(request, name)}
    response_format = request.response_format
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return {"json_object": True}
    schema = response_format.json_schema.schema_
    return {"json": schema if schema is not None else {}}


def requested_generation(request: GenerationFields, lora_name: str | None = None) -> GenerationRequest:
    """What the client asks of every generation, before the prompt and budget are known
    (enough for a request format to say what it cannot do)."""
    return GenerationRequest(
        prompt="",
        prompt_tokens=0,
        max_tokens=0,
        stream=request.is_stream,
        sampling=sampling_for(request),
        lora_name=lora_name,
        logprobs=request.top_logprobs_count,
        structured=structured_output_for(request),
    )


def plan_generations(
    asked: GenerationRequest,
    request: GenerationFields,
    prompt: Prompt,
    limits: Limits,
    structured: dict | None = None,
    extra_sampling: dict | None = None,
) -> list[GenerationRequest]:
    """One generation per choice: `asked` with the prompt and the budget. With a seed, choice i
    uses seed + i, so choices differ but the whole response stays reproducible. `structured`
    (from tool_choice) overrides `response_format`. What vLLM would refuse once the budget and the
    constraint are known is a 400 here (`check_*`)."""
    base = replace(
        asked,
        prompt=prompt.text,
        prompt_tokens=prompt.num_tokens,
        prompt_token_ids=prompt.token_ids,
        max_tokens=max_tokens_for(request, prompt, limits),
        sampling={**asked.sampling, **(extra_sampling or {})},
        structured=structured or asked.structured,
    )
    check_min_tokens(request, base.max_tokens)
    check_token_ids(request, limits.vocab_size)
    check_schema_nesting(request, base.structured, from_tools=bool(structured))
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
