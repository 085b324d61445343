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
from .images import ImageFile, ImagePolicy, count_images, load_images
from .plan import Limits, ModelNames, plan_generations, requested_generation
from .protocol.tokenize import endpoint_of
from .tokenizing import tokenize_answer
from .policy import check_body_size, check_limits, check_special_tokens, context_length, eos_token_ids, image_rule
from .protocol import ChatCompletionRequest, CompletionRequest, parse_chat_request, parse_completion_request
from .repository import config_vocab_size
from .chunks import ChatResponseBuilder, ResponseBuilder
from .completion_chunks import CompletionResponseBuilder
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
    # vLLM's `/tokenize` and `/detokenize` (a body with `endpoint`: see protocol/tokenize.py).
    answers_tokenize = False
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
        check_body_size(self.settings, body)
        if self.answers_tokenize and (special := endpoint_of(body)) is not None:
            return Staged(None, None, None, request_id, 0, answer=tokenize_answer(self, *special))
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
        check_limits(self.settings, request)

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
    answers_tokenize = True
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
    answers_tokenize = True
    builder_class = CompletionResponseBuilder
    default_budget = 16  # as OpenAI's and vLLM's Completions (vLLM: CompletionRequest.max_tokens = 16)

    def parse(self, body: str | bytes) -> CompletionRequest:
        return parse_completion_request(body)

    def render(self, request: CompletionRequest) -> Prompt:
        return self.renderer.plain(request.prompt)

    def reading(self, request: CompletionRequest, prompt: Prompt) -> Reading:
        return Reading({"echo_text": request.prompt if request.echo else ""})
