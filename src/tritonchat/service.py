"""From a request body to a prepared request: all that `openai_chat` does before it calls the
generation model, with no Triton in sight.

    body --parse--> validated request (protocol.py)
         --check_policy--> what this server refuses (config, target format, model names)
         --render--> prompt (template.py)
         --plan--> one generation per choice (plan.py, tool_choice.py)
         --format--> target tensors per choice (formats/), decoders, response builder (chunks.py)

`ChatService` and `CompletionService` are built once per model instance from its settings;
`prepare` runs per request (in a worker thread: rendering a long conversation takes a while).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass, replace

from . import __version__
from .errors import BadRequestError, OpenAIError
from .formats import FORMATS, Decoder, FormatOptions, GenerationRequest, RequestFormat, TargetCall
from .images import ImageFile, ImagePolicy, count_images, load_images, model_has_vision
from .parsers import get_reasoning_parser, get_tool_parser
from .plan import Limits, ModelNames, plan_generations, requested_generation
from .protocol import ChatCompletionRequest, CompletionRequest, parse_chat_request, parse_completion_request
from .repository import config_context_length, config_vocab_size, generation_eos_ids
from .chunks import ChatResponseBuilder, CompletionResponseBuilder, ResponseBuilder
from .settings import Settings
from .target import TargetInterface, adapt_options
from .template import Prompt, PromptRenderer, load_tokenizer, private_names
from .tokens import TokenBytes
from .tool_choice import plan_tools, prompt_opens_reasoning


@dataclass(frozen=True)
class Reading:
    """How a service reads the generated text of one request: extra response-builder arguments,
    and what the generation must add for it (a structured-output constraint, sampling settings)."""

    builder_args: dict
    structured: dict | None = None
    sampling: dict | None = None


@dataclass(frozen=True)
class Staged:
    """A request that passed every check that needs no image (see `Service.stage`)."""

    request: ChatCompletionRequest | CompletionRequest
    asked: GenerationRequest
    prompt: Prompt
    request_id: str
    image_count: int
    # The whole answer, when the request needs no generation (Anthropic's count_tokens).
    answer: str | None = None


@dataclass
class PreparedRequest:
    """A valid request, ready to be sent: per choice its call and the decoder of its responses."""

    request: ChatCompletionRequest | CompletionRequest
    prompt: Prompt
    generations: list[GenerationRequest]
    calls: list[TargetCall]
    decoders: list[Decoder]
    builder: ResponseBuilder

    stream_interval: int = 1

    @property
    def stream(self) -> bool:
        return self.request.is_stream


class Service:
    """What the chat and completions services share."""

    id_prefix = ""
    # The completion budget of a request that sets none, where `default_max_tokens` is 0
    # (0: whatever fits in the context).
    default_budget = 0

    def __init__(self, settings: Settings, tokenizer=None):
        check_special_tokens(settings)
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(settings.tokenizer)
        self.settings = settings
        self.renderer = PromptRenderer(tokenizer, settings.chat_template_content_format)
        self.token_bytes = TokenBytes(tokenizer)
        self.limits = Limits(
            context_length=settings.max_model_len or context_length(settings.tokenizer, tokenizer),
            default_max_tokens=settings.default_max_tokens or self.default_budget,
            vocab_size=config_vocab_size(settings.tokenizer),
        )
        self.names = ModelNames(settings.served_model_name, settings.lora_separator, settings.lora_adapters)
        self.format: RequestFormat = FORMATS[settings.request_format](
            FormatOptions(
                target_model=settings.target_model,
                structured_outputs_key=settings.structured_outputs_key or "structured_outputs",
                tokenizer=tokenizer,
                seed_input=settings.trtllm_seed_input or "seed",
                min_tokens_input=settings.trtllm_min_tokens_input or "min_tokens",
                token_count_outputs=settings.trtllm_token_counts != "false",
                end_id=settings.end_id if settings.end_id >= 0 else None,
                pad_id=settings.pad_id if settings.pad_id >= 0 else None,
                eos_token_ids=eos_token_ids(settings.tokenizer, tokenizer),
                keeps_special_tokens=not settings.trtllm_skip_special_tokens,
                lora_task_ids=settings.lora_task_id_map,
                lora_paths=settings.lora_path_map,
                stream_whole=settings.vllm_stream_whole,
            )
        )
        self.image_policy = ImagePolicy(
            max_images=settings.max_images, max_bytes=settings.max_image_bytes,
            allowlist=settings.image_url_prefixes, fetch_timeout_s=settings.image_fetch_timeout_s)
        self.image_rule = image_rule(settings)
        fingerprint = f"{__version__}|{settings.served_model_name}|{settings.target_model}"
        self.system_fingerprint = "fp_" + hashlib.sha256(fingerprint.encode()).hexdigest()[:10]

    def learn_target(self, interface: TargetInterface) -> None:
        """Adopt what the target takes (its input names by release, its optional features)."""
        settings = self.settings
        self.format.options = adapt_options(
            self.format.options, interface, seed_input=settings.trtllm_seed_input,
            min_tokens_input=settings.trtllm_min_tokens_input, token_counts=settings.trtllm_token_counts,
            structured_outputs_key=settings.structured_outputs_key)

    def prepare(self, body: str | bytes, request_id: str = "") -> PreparedRequest:
        """Parse, check, render and plan one request; raises `OpenAIError` for what is refused.
        (`stage`, then the images loaded here, then `complete`: a caller that fetches images
        elsewhere, not to hold a worker thread while they download, calls those two itself.)"""
        staged = self.stage(body, request_id)
        images = load_images(staged.request, self.image_policy) if staged.image_count else None
        return self.complete(staged, images)

    def stage(self, body: str | bytes, request_id: str = "") -> Staged:
        """The checks that need no image: parse, this server's policy, the chat template."""
        if len(body) > self.settings.max_request_bytes:
            raise BadRequestError(
                f"The request body has {len(body)} bytes; this server takes at most "
                f"{self.settings.max_request_bytes} (max_request_bytes)."
            )
        request = self.parse(body)
        asked = self.check_policy(request)
        prompt = self.render(request)
        return Staged(request, asked, prompt, request_id, count_images(request))

    def complete(self, staged: Staged, images: list[ImageFile] | None = None) -> PreparedRequest:
        """The rest of `prepare`, with the request's images (read after the cheaper checks and the
        template accepted them)."""
        request, asked, prompt, request_id = staged.request, staged.asked, staged.prompt, staged.request_id
        if images:
            asked = replace(asked, images=tuple(image.data for image in images))
        reading = self.reading(request, prompt)
        generations = plan_generations(asked, request, prompt, self.limits, reading.structured, reading.sampling)
        if reading.structured or reading.sampling:  # what tool_choice and the parsers add must suit the target too
            self.format.check(generations[0])
        builder = self.builder_class(
            completion_id=self.id_prefix + (request_id or uuid.uuid4().hex),
            created=int(time.time()),
            model=request.model or self.settings.served_model_name,
            system_fingerprint=self.system_fingerprint,
            choices=len(generations),
            prompt_tokens=prompt.num_tokens,
            include_usage=request.include_usage,
            continuous_usage=request.continuous_usage,
            top_logprobs=request.top_logprobs_count,
            token_bytes=self.token_bytes,
            **reading.builder_args,
        )
        calls = [
            TargetCall(
                self.format.inputs(generation),
                self.format.requested_outputs(generation),
                request_id if len(generations) == 1 else f"{request_id}.{index}",
            )
            for index, generation in enumerate(generations)
        ]
        decoders = [self.format.decoder(generation) for generation in generations]
        interval = max(self.settings.stream_interval, request.stream_interval or 1) if request.is_stream else 1
        return PreparedRequest(request, prompt, generations, calls, decoders, builder, interval)

    def check_policy(self, request) -> GenerationRequest:
        """Everything this server refuses of a valid request, in one place: unknown model names
        (404), what its configuration does not allow, what the generation model cannot do (400
        naming the field). Returns what every generation asks for."""
        lora_name = self.names.resolve(request.model)
        self.check_limits(request)
        if isinstance(request, ChatCompletionRequest):
            if request.chat_template is not None and not self.settings.trust_request_chat_template:
                raise BadRequestError(
                    "A per-request 'chat_template' is not allowed by this server (see its 'trust_request_chat_template').",
                    param="chat_template",
                )
            if request.chat_template is not None and (reached := private_names(request.chat_template)):
                raise BadRequestError(
                    f"The chat template reaches for {reached[0]!r}; templates may not use "
                    "names starting with '_'.",
                    param="chat_template",
                )
            self.check_images(request)
            if request.effective_tool_choice == "auto" and not self.settings.tool_call_parser:
                raise BadRequestError(
                    "This server does not parse tool calls ('tool_call_parser' is not set): use tool_choice 'none', "
                    "'required' or a named function.",
                    param="tool_choice",
                )
        asked = requested_generation(request, lora_name)
        self.format.check(asked)
        return asked

    def check_images(self, request: ChatCompletionRequest) -> None:
        """Images only where the model and the generation model take them, and not too many."""
        count = count_images(request)
        if not count:
            return
        reason = self.format.image_refusal() or self.image_rule
        if reason:
            raise BadRequestError(f"Images are not supported here: {reason}.", param="messages")
        if self.settings.max_images and count > self.settings.max_images:
            raise BadRequestError(
                f"'messages' holds {count} images; this server allows at most {self.settings.max_images} "
                "(max_images).", param="messages")

    def check_limits(self, request) -> None:
        """The server's caps (settings `max_*`), each a 400 naming the field and the cap."""
        settings = self.settings
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

    def public_error(self, error: OpenAIError) -> OpenAIError:
        """`error` as this service's clients see it: OpenAI's error object here (a service of
        another API, Anthropic's, gives it that API's shape)."""
        return error

    # What the chat and completions services do differently.
    builder_class: type[ResponseBuilder] = ResponseBuilder

    def parse(self, body: str | bytes):
        raise NotImplementedError

    def render(self, request) -> Prompt:
        raise NotImplementedError

    def reading(self, request, prompt: Prompt) -> Reading:
        """How this request's generated text is read (tool calls, reasoning, echo)."""
        raise NotImplementedError


class ChatService(Service):
    """Chat Completions (`openai_chat`)."""

    id_prefix = "chatcmpl-"
    builder_class = ChatResponseBuilder

    def parse(self, body: str | bytes) -> ChatCompletionRequest:
        return parse_chat_request(body)

    def render(self, request: ChatCompletionRequest) -> Prompt:
        return self.renderer.render(request)

    def reading(self, request: ChatCompletionRequest, prompt: Prompt) -> Reading:
        plan = plan_tools(
            request,
            tool_call_parser=self.settings.tool_call_parser,
            reasoning_parser=self.settings.reasoning_parser,
            starts_in_reasoning=prompt_opens_reasoning(prompt.text),
        )
        builder_args = {
            "choice_text": plan.choice_text,
            "calls_finish_reason": plan.calls_finish_reason,
            "reasoning_field": self.settings.reasoning_field if request.include_reasoning is not False else "",
            "echo_text": echo_text(request),
        }
        return Reading(builder_args, plan.structured, plan.sampling)


def echo_text(request: ChatCompletionRequest) -> str:
    """vLLM's chat `echo`: the answer starts with the last message when that message is the
    assistant's (the role of the answer; text parts joined by newlines), else with nothing."""
    last = request.messages[-1]
    if not request.echo or last.role != "assistant" or not last.content:
        return ""
    return last.content if isinstance(last.content, str) else "\n".join(getattr(part, "text", "") for part in last.content)


class CompletionService(Service):
    """(Legacy) Completions (`openai_completions`)."""

    id_prefix = "cmpl-"
    builder_class = CompletionResponseBuilder
    default_budget = 16  # as OpenAI's and vLLM's Completions (vLLM: CompletionRequest.max_tokens = 16)

    def parse(self, body: str | bytes) -> CompletionRequest:
        return parse_completion_request(body)

    def render(self, request: CompletionRequest) -> Prompt:
        return self.renderer.plain(request.prompt)

    def reading(self, request: CompletionRequest, prompt: Prompt) -> Reading:
        return Reading({"echo_text": request.prompt if request.echo else ""})


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
