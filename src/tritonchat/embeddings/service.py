"""From an embeddings request body to one call of Triton's vLLM backend per input, with no
Triton in sight: the same service shape as the chat models' (`stage`, then `complete`), so the
same model glue, transports and sender serve it.

    body --parse--> EmbeddingRequest (protocol/embeddings.py)
         --check--> this server's model name, the model's Matryoshka sizes (`dimensions`)
         --tokenize--> per input its token count (the context length, the vocabulary), truncated
                       or without special tokens when asked (then its token ids are what is sent)
         --format--> per input the backend's `embedding_request` (target.py), the builder (response.py)

What vLLM's own server refuses is refused here first with its reason (400, naming the field), so
nothing that would fail reaches the engine.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..errors import BadRequestError, ConfigError, OpenAIError
from ..formats import Decoder, FormatOptions, TargetCall
from ..plan import ModelNames
from ..policy import check_body_size, context_length
from ..protocol.embeddings import EmbeddingRequest, parse_embedding_request
from ..repository import config_vocab_size
from ..settings import Settings
from ..target import TargetInterface, adapt_options
from ..template import load_tokenizer
from .response import EmbeddingsBuilder
from .target import EmbeddingInput, VllmEmbeddingFormat


@dataclass(frozen=True)
class Limits:
    context_length: int
    vocab_size: int


@dataclass(frozen=True)
class Matryoshka:
    """The sizes a model's vectors may be cut to (vLLM's reading of its config.json)."""

    supported: bool = False
    dimensions: tuple[int, ...] | None = None  # None: any size up to `embedding_size`
    embedding_size: int = 0

    @classmethod
    def read(cls, model_dir: str) -> Matryoshka:
        try:
            config = json.loads((Path(model_dir) / "config.json").read_text())
        except (OSError, ValueError):
            return cls()
        text = config.get("text_config") or {}
        dims = config.get("matryoshka_dimensions")
        size = config.get("hidden_size") or text.get("hidden_size") or 0
        return cls(bool(dims) or bool(config.get("is_matryoshka")), tuple(dims) if dims else None, int(size))

    def check(self, dimensions: int, model: str) -> None:
        """vLLM's refusals of `dimensions` (PoolingParams), in its words."""
        if not self.supported:
            raise BadRequestError(
                f"Model {model!r} does not support Matryoshka embeddings; dimensions must be unset "
                f"(received dimensions={dimensions}).", param="dimensions")
        if self.embedding_size and not 1 <= dimensions <= self.embedding_size:
            raise BadRequestError(
                f"Model {model!r} only supports dimensions in range [1, {self.embedding_size}], got {dimensions}.",
                param="dimensions")
        if self.dimensions is not None and dimensions not in self.dimensions:
            raise BadRequestError(
                f"Model {model!r} only supports Matryoshka dimensions {list(self.dimensions)}, got {dimensions}.",
                param="dimensions")


@dataclass(frozen=True)
class StagedEmbeddings:
    """A request that passed every check, with what each input sends."""

    request: EmbeddingRequest
    items: list[EmbeddingInput]
    request_id: str
    image_count: int = 0
    answer: str | None = None


@dataclass
class PreparedEmbeddings:
    """Per input its call and the decoder of its response, and the response's builder."""

    request: EmbeddingRequest
    calls: list[TargetCall]
    decoders: list[Decoder]
    builder: EmbeddingsBuilder
    stream: bool = False
    stream_interval: int = 1


class EmbeddingService:
    """OpenAI embeddings (`openai_embeddings`): `POST /v1/embeddings`, on Triton's vLLM backend."""

    id_prefix = "embd-"

    def __init__(self, settings: Settings, tokenizer=None):
        if settings.request_format != "vllm":
            raise ConfigError(
                f"openai_embeddings needs Triton's vLLM backend (request_format 'vllm'), not "
                f"{settings.request_format!r}: TensorRT-LLM's models have no embedding interface.")
        if getattr(settings, "engine", "target") not in ("", "target"):
            raise ConfigError("openai_embeddings calls its target_model (engine 'target'); it has no engine of its own.")
        self.settings = settings
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(settings.tokenizer)
        self.limits = Limits(
            context_length=settings.max_model_len or context_length(settings.tokenizer, self.tokenizer),
            vocab_size=config_vocab_size(settings.tokenizer),
        )
        self.matryoshka = Matryoshka.read(settings.tokenizer)
        self.names = ModelNames(settings.served_model_name, settings.lora_separator, settings.lora_adapters)
        self.format = VllmEmbeddingFormat(FormatOptions(target_model=settings.target_model))

    def learn_target(self, interface: TargetInterface) -> None:
        """Adopt what the target takes (its input names: whether it has the embedding input)."""
        self.format.options = adapt_options(self.format.options, interface)

    def public_error(self, error: OpenAIError) -> OpenAIError:
        return error

    # ---- per request ---------------------------------------------------------------------
    def stage(self, body: str | bytes, request_id: str = "") -> StagedEmbeddings:
        """Parse and check a request and tokenize its inputs (a worker thread runs this)."""
        check_body_size(self.settings, body)
        request = parse_embedding_request(body)
        if self.names.resolve(request.model) is not None:
            raise BadRequestError("LoRA adapters serve no embeddings on Triton's vLLM backend; use the base model.",
                                  param="model")
        if request.dimensions is not None:
            self.matryoshka.check(request.dimensions, self.settings.served_model_name)
        self.format.check_target()
        truncate = self.truncation(request)
        items = [EmbeddingInput(self.checked(request, index, item, truncate), request.dimensions)
                 for index, item in enumerate(request.inputs)]
        return StagedEmbeddings(request, items, request_id)

    def truncation(self, request: EmbeddingRequest) -> int | None:
        """How many tokens each input keeps (`truncate_prompt_tokens`; -1: the context length)."""
        asked, limit = request.truncate_prompt_tokens, self.limits.context_length
        if asked is None:
            return None
        if asked < 0:
            return limit or None
        if limit and asked > limit:
            raise BadRequestError(
                f"truncate_prompt_tokens={asked} cannot be greater than max_model_len = {limit}. "
                "Please request a smaller truncation size.", param="truncate_prompt_tokens")
        return asked

    def checked(self, request: EmbeddingRequest, index: int, item: str | list[int], truncate: int | None):
        """What input `index` sends: as given, or its token ids when truncation or
        `add_special_tokens: false` changed them; 400 when it is out of the model's reach."""
        where = "input" if isinstance(request.input, str) or isinstance(request.input[0], int) else f"input[{index}]"
        if isinstance(item, str):
            ids = self.tokenize(item, request, truncate)
            send = ids if truncate is not None or not request.add_special_tokens else item
        else:
            ids = self.truncated(item, request, truncate)
            send = ids
            vocab = self.limits.vocab_size
            if vocab and (bad := next((token for token in ids if token >= vocab), None)) is not None:
                raise BadRequestError(f"Token id {bad} in '{where}' is out of vocabulary (the model has {vocab} "
                                      "tokens).", param=where)
        if not ids:
            raise BadRequestError(f"'{where}' has no tokens left to embed.", param=where)
        limit = self.limits.context_length
        if limit and len(ids) > limit:
            raise BadRequestError(
                f"This model's maximum context length is {limit} tokens. However, '{where}' has {len(ids)} tokens. "
                "Please reduce the length of the input.", param=where, code="context_length_exceeded")
        return send

    def tokenize(self, text: str, request: EmbeddingRequest, truncate: int | None) -> list[int]:
        """A text's token ids as vLLM makes them: the tokenizer's own truncation (on its side),
        or with an explicit `truncation_side`, the whole sequence cut on that side."""
        special = request.add_special_tokens
        if truncate and request.truncation_side is None:
            return list(self.tokenizer(text, add_special_tokens=special, truncation=True,
                                       max_length=truncate).input_ids)
        return self.truncated(list(self.tokenizer(text, add_special_tokens=special).input_ids), request, truncate)

    def truncated(self, ids: list[int], request: EmbeddingRequest, truncate: int | None) -> list[int]:
        if truncate is None or truncate >= len(ids):
            return ids
        side = request.truncation_side or getattr(self.tokenizer, "truncation_side", "right")
        return ids[len(ids) - truncate:] if side == "left" else ids[:truncate]

    def complete(self, staged: StagedEmbeddings, images=None) -> PreparedEmbeddings:
        """The calls and the builder of a staged request."""
        request, request_id = staged.request, staged.request_id
        count = len(staged.items)
        builder = EmbeddingsBuilder(
            completion_id=self.id_prefix + (request_id or uuid.uuid4().hex),
            created=int(time.time()),
            model=request.model or self.settings.served_model_name,
            system_fingerprint="",
            choices=count,
            encoding_format=request.encoding_format,
            embed_dtype=request.embed_dtype,
            endianness=request.endianness,
        )
        calls = [TargetCall(self.format.inputs(item), self.format.requested_outputs(item),
                            request_id if count == 1 else f"{request_id}.{index}")
                 for index, item in enumerate(staged.items)]
        decoders = [Decoder(self.format, item) for item in staged.items]
        return PreparedEmbeddings(request, calls, decoders, builder)
