"""The OpenAI Chat Completions and Completions requests, validated strictly (pydantic v2).

Every rule about the request alone lives here: types are strict (a string is not a number,
a float is not an integer), ranges follow OpenAI's documented limits, narrowed to what vLLM's
`SamplingParams` and its engine take (Triton's vLLM backend answers a value vLLM refuses only
with "'NoneType' object has no attribute 'lora_name'"; tests/unit/test_sampling_refusals.py
holds the two to each other), and the rules that tie fields together are model validators that
raise `BadRequestError` naming the field.
Fields of OpenAI's or vLLM's schemas that this server does not carry out are refused at any
value that would change the result (known.py).
What depends on this server (its configuration, the generation model, the prompt's length)
is checked in `service.check_policy` and `plan.max_tokens_for`. Fields that neither
OpenAI nor vLLM knows are ignored (and logged at debug level); known fields with bad values
are a 400.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from ..errors import BadRequestError
from . import known
from .known import check_known
from .parts import (
    Message,
    Grammar,
    NamedToolChoice,
    Penalty,
    Probability,
    Regex,
    ResponseFormat,
    StreamOptions,
    StructuredOutputs,
    Tool,
    TopP,
    json_schema_from_text,
    _Strict,
)
from .validation import validation_error

log = logging.getLogger(__name__)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The largest integer vLLM's engine can be sent (its requests travel as MessagePack).
UINT64_MAX = 2**64 - 1
# Distinct `bad_words` vLLM takes for sure: it forbids at most 128 token sequences
# (VLLM_MAX_NUM_BAD_WORDS), and makes one or two of each word (with and without a leading space).
MAX_BAD_WORDS = 64
# A completion budget (max_tokens, max_completion_tokens).
TokenBudget = Annotated[int, Field(ge=1, le=UINT64_MAX)]


def _has_a_token(word: str) -> str:
    # vLLM strips a bad word's leading whitespace before tokenizing it, and refuses a word
    # left without tokens.
    if not word.strip():
        raise ValueError("a bad word must not be only whitespace")
    return word


# Names `apply_chat_template` sets itself; `chat_template_kwargs` must not.
RESERVED_TEMPLATE_KWARGS = ("messages", "tools", "add_generation_prompt", "continue_final_message", "tokenize", "chat_template")


class GenerationFields(_Strict):
    """Fields chat completions and completions share."""

    model: str | None = None
    max_tokens: TokenBudget | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: TopP | None = None
    top_k: Annotated[int, Field(ge=-1, le=UINT64_MAX)] | None = None
    min_p: Probability | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, le=2.0)] | None = None
    seed: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] | None = None
    stop: str | Annotated[list[str], Field(max_length=16)] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0)]] | None = None
    min_tokens: Annotated[int, Field(ge=0)] | None = None
    ignore_eos: bool | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = None
    # vLLM's sampling extras (passed to vLLM; refused by the TensorRT-LLM formats at other values
    # than their defaults, except skip_special_tokens on `tensorrt_llm`, which detokenizes here).
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool | None = None
    bad_words: list[Annotated[str, Field(min_length=1), AfterValidator(_has_a_token)]] | None = None
    allowed_token_ids: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)] | None = None
    # vLLM's constrained generation beyond response_format, and its older guided_* aliases.
    structured_outputs: StructuredOutputs | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: Regex | None = None
    guided_choice: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    guided_grammar: Grammar | None = None
    n: Annotated[int, Field(ge=1, le=128)] | None = None
    response_format: ResponseFormat | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    # vLLM's: tokens per streamed chunk at least (the first and last chunks excepted); it can
    # only raise the server's `stream_interval`. Ignored without `stream`, as vLLM does.
    stream_interval: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None

    # Accepted because clients send them; they do not change generation.
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_not_empty(cls, value):
        stops = [value] if isinstance(value, str) else (value or [])
        if any(s == "" for s in stops):
            raise ValueError("stop sequences must not be empty strings")
        return value

    @field_validator("bad_words")
    @classmethod
    def _few_bad_words(cls, value):
        if value is not None and len(set(value)) > MAX_BAD_WORDS:
            raise ValueError(
                f"at most {MAX_BAD_WORDS} different words are supported, got {len(set(value))} (vLLM forbids at "
                "most 128 token sequences, and a word can make two)")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, value):
        for key in value or {}:
            if not key.lstrip("-").isdigit():
                raise ValueError(f"keys must be token ids, got {key!r}")
        return value

    @model_validator(mode="after")
    def _stream_options_need_stream(self):
        if self.stream_options is not None and not self.stream:
            raise BadRequestError("'stream_options' is only allowed when 'stream' is true.", param="stream_options")
        return self

    @field_validator("guided_json")
    @classmethod
    def _schema(cls, value):
        return json_schema_from_text(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_constraint(self):
        given = [name for name in ("structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar")
                 if getattr(self, name) is not None]
        if self.response_format is not None and self.response_format.type != "text":
            given.insert(0, "response_format")
        if len(given) > 1:
            raise BadRequestError(f"Only one constraint may be given; got {', '.join(given)}.", param=given[1])
        return self

    @property
    def constraint_field(self) -> str | None:
        """The field holding the request's structured-output constraint, if any."""
        for name in ("structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar"):
            if getattr(self, name) is not None:
                return name
        if self.response_format is not None and self.response_format.type != "text":
            return "response_format"
        return None

    @property
    def is_stream(self) -> bool:
        return bool(self.stream)

    @property
    def choices(self) -> int:
        return self.n or 1

    @property
    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.continuous_usage_stats)


class ChatCompletionRequest(GenerationFields):
    """Every field of OpenAI's Chat Completions request, plus the usual vLLM extras."""

    messages: Annotated[list[Message], Field(min_length=1)]
    max_completion_tokens: TokenBudget | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None

    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None

    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # Passed to the chat template, as vLLM does (templates that read them use them).
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    include_reasoning: bool | None = None  # false: reasoning (parsed out) is left out of the response
    echo: bool | None = None  # vLLM's: the answer starts with the last message when it is the assistant's
    documents: list[dict[str, str]] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise BadRequestError("'top_logprobs' requires 'logprobs' to be true.", param="top_logprobs")
        if self.add_generation_prompt and self.continue_final_message:
            raise BadRequestError(
                "'add_generation_prompt' and 'continue_final_message' cannot both be true.",
                param="continue_final_message",
            )
        if self.continue_final_message and self.messages[-1].role != "assistant":
            raise BadRequestError(
                "'continue_final_message' needs the last message to be from the assistant.",
                param="continue_final_message",
            )
        for reserved in RESERVED_TEMPLATE_KWARGS:
            if reserved in (self.chat_template_kwargs or {}):
                raise BadRequestError(f"'chat_template_kwargs' must not set {reserved!r}.", param="chat_template_kwargs")
        self._check_tools()
        return self

    def _check_tools(self) -> None:
        choice = self.tool_choice
        if self.tools is not None and not self.tools:
            raise BadRequestError("'tools' must not be empty; leave it out instead.", param="tools")
        if choice is not None and not self.tools and choice != "none":
            raise BadRequestError("'tool_choice' needs 'tools'.", param="tool_choice")
        constrained = isinstance(choice, NamedToolChoice) or choice == "required"
        if constrained and self.constraint_field is not None:
            raise BadRequestError(
                f"'{self.constraint_field}' cannot be combined with a named or required 'tool_choice'.",
                param=self.constraint_field,
            )
        if isinstance(choice, NamedToolChoice) and choice.function.name not in self.functions:
            raise BadRequestError(f"The tool {choice.function.name!r} in 'tool_choice' is not in 'tools'.", param="tool_choice")

    @property
    def functions(self) -> dict[str, dict]:
        """The functions of `tools`, by name."""
        return {tool.function.name: tool.function.model_dump(exclude_none=True) for tool in self.tools or []}

    @property
    def effective_tool_choice(self) -> str | NamedToolChoice:
        """`tool_choice`, or its default: `auto` with tools, else `none`."""
        if self.tool_choice is not None:
            return self.tool_choice
        return "auto" if self.tools else "none"

    @property
    def requested_max_tokens(self) -> int | None:
        """`max_completion_tokens` wins over the deprecated `max_tokens`."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def top_logprobs_count(self) -> int | None:
        """How many alternatives per token; None when no log probabilities were asked for."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(GenerationFields):
    """OpenAI's (legacy) Completions request."""

    prompt: str | list[Any]
    suffix: str | None = None
    echo: bool | None = None
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    best_of: Annotated[int, Field(ge=1, le=20)] | None = None

    @model_validator(mode="after")
    def _supported(self) -> CompletionRequest:
        if not isinstance(self.prompt, str):
            raise BadRequestError("'prompt' must be a single string; lists of prompts are not supported.", param="prompt")
        if self.prompt == "":
            raise BadRequestError("'prompt' must not be empty.", param="prompt")
        if self.suffix:
            raise BadRequestError("'suffix' is not supported.", param="suffix")
        if self.best_of is not None and self.best_of != self.choices:
            raise BadRequestError("'best_of' other than 'n' is not supported.", param="best_of")
        if self.echo and self.logprobs is not None:
            raise BadRequestError("'echo' together with 'logprobs' is not supported.", param="echo")
        return self

    @property
    def top_logprobs_count(self) -> int | None:
        return self.logprobs


def parse_request(body: str | bytes, model: type[GenerationFields], known: dict | None = None):
    """Parse and validate a JSON request body, or raise `BadRequestError` naming the field."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequestError(f"The request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequestError("The request body is nested too deeply.") from None
    if not isinstance(data, dict):
        raise BadRequestError("The request body must be a JSON object.")
    check_known(data, known or {}, lambda name: name in model.model_fields)
    try:
        request = model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None
    except RecursionError:
        raise BadRequestError("The request body is nested too deeply.") from None
    if log.isEnabledFor(logging.DEBUG):
        unknown = sorted(set(data) - set(model.model_fields))
        if unknown:
            log.debug("ignoring unknown request fields: %s", ", ".join(unknown))
    return request


def parse_chat_request(body: str | bytes) -> ChatCompletionRequest:
    return parse_request(body, ChatCompletionRequest, known.CHAT)


def parse_completion_request(body: str | bytes) -> CompletionRequest:
    return parse_request(body, CompletionRequest, known.COMPLETION)
