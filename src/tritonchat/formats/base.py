"""What every generation-model request format shares: the request we want and the outputs we read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class GenerationRequest:
    """One generation (one choice) as the chat layer wants it, independent of the backend."""

    prompt: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    # The prompt as the tokenizer encodes it (with special tokens), when already known.
    prompt_token_ids: tuple[int, ...] | None = None
    # Sampling settings under vLLM's SamplingParams names (temperature, top_p, seed, stop, ...).
    sampling: dict[str, Any] = field(default_factory=dict)
    lora_name: str | None = None
    # Top log probabilities per generated token; None: no log probabilities at all.
    logprobs: int | None = None
    # Structured-output constraint, as vLLM's StructuredOutputsParams fields (json, json_object, ...).
    structured: dict[str, Any] | None = None
    # Image files for the prompt's image placeholders, in prompt order (checked images.py).
    images: tuple[bytes, ...] = ()


@dataclass
class TargetCall:
    """One streaming request to the generation model (one choice): its input tensors by name,
    the outputs to ask for, and the request id to send."""

    inputs: dict[str, np.ndarray]
    outputs: list[str]
    request_id: str


@dataclass
class TokenLogprob:
    """One generated token and its log probability, with the most likely alternatives."""

    token_id: int
    token: str
    logprob: float
    # (token id, token text, logprob, rank) of the alternatives, most likely first.
    top: list[tuple[int, str, float, int]] = field(default_factory=list)


@dataclass
class GenerationOutput:
    """What one backend response added to a choice."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None

    def merge(self, later: GenerationOutput) -> GenerationOutput:
        """This output followed by `later`, as if the backend had sent them as one."""
        logprobs = None
        if self.logprobs is not None or later.logprobs is not None:
            logprobs = (self.logprobs or []) + (later.logprobs or [])
        return GenerationOutput(
            text=self.text + later.text,
            finish_reason=later.finish_reason or self.finish_reason,
            prompt_tokens=later.prompt_tokens if later.prompt_tokens is not None else self.prompt_tokens,
            completion_tokens=self.completion_tokens + later.completion_tokens,
            logprobs=logprobs,
        )


@dataclass
class FormatOptions:
    """What a request format needs to know about the deployment (config parameters)."""

    target_model: str = ""
    structured_outputs_key: str = "structured_outputs"
    tokenizer: Any = None
    # TensorRT-LLM: input names that changed between releases, ids, capabilities.
    seed_input: str = "seed"
    min_tokens_input: str = "min_tokens"
    token_count_outputs: bool = True
    end_id: int | None = None
    pad_id: int | None = None
    # Every id that ends a turn (generation_config.json's and the tokenizer's EOS). vLLM
    # stops at all of them itself; TensorRT-LLM takes one `end_id`, the rest go as stop words.
    eos_token_ids: tuple[int, ...] = ()
    # `trtllm`: whether the ensemble's postprocessing keeps special tokens (trtllm_skip_special_tokens false).
    keeps_special_tokens: bool = False
    # `vllm`: ask the backend for a stream also for a whole (non-streamed) answer.
    stream_whole: bool = False
    # The target's input names once read from the server (see target.py); None: not known,
    # so every input is assumed to exist.
    target_inputs: frozenset[str] | None = None
    # `tensorrt_llm` / `trtllm`: adapter name -> LoRA task id.
    lora_task_ids: dict[str, int] = field(default_factory=dict)
    # `llmapi`: adapter name -> its path on the server's file system.
    lora_paths: dict[str, str] = field(default_factory=dict)
    # Whether the target is decoupled (may stream); assumed until its configuration is read.
    target_decoupled: bool = True

    def takes(self, name: str) -> bool:
        """Whether the target has the input `name` (assumed while its interface is unknown)."""
        return bool(name) and (self.target_inputs is None or name in self.target_inputs)

def string_tensor(value: str) -> np.ndarray:
    """A one-element BYTES tensor without a batch dimension."""
    return np.array([value.encode("utf-8")], dtype=np.object_)


def element_text(value) -> str:
    """One element of a BYTES output as text (invalid UTF-8 replaced)."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def first_text(array: np.ndarray | None) -> str | None:
    """The first element of a BYTES output as text; None when the output is absent or empty."""
    return element_text(array.reshape(-1)[0]) if array is not None and array.size else None


def first_int(array: np.ndarray | None) -> int | None:
    """The first element of an integer output; None when the output is absent or empty."""
    return int(array.reshape(-1)[0]) if array is not None and array.size else None


def with_eos_texts(tokenizer, stops: list[str], eos_ids: list[int]) -> list[str]:
    """`stops`, then the text of each id in `eos_ids` that is not among them: for a target that
    stops at one end id and takes other stop words only as text."""
    if tokenizer is None:
        return stops
    return stops + [text for token in eos_ids if (text := tokenizer.decode([token])) and text not in stops]


class Decoder:
    """Reads one generation stream's responses, in order. `finished` turns true when the text
    itself ended the generation (a stop string matched here), so the caller stops reading."""

    finished = False

    def __init__(self, request_format: RequestFormat, request: GenerationRequest):
        self.format = request_format
        self.request = request

    def decode(self, outputs: dict[str, np.ndarray]) -> GenerationOutput:
        return self.format.parse(outputs)

    def end(self) -> GenerationOutput | None:
        """What is left when the stream ends (held-back text, an inferred finish reason)."""
        return None


class RequestFormat:
    """Maps a `GenerationRequest` to a generation model's input tensors, and its outputs back."""

    name = ""
    # Whether the last response of every generation says why it stopped.
    reports_finish_reason = False

    def __init__(self, options: FormatOptions | None = None):
        self.options = options or FormatOptions()

    @property
    def structured_outputs_key(self) -> str:
        return self.options.structured_outputs_key

    def check(self, request: GenerationRequest) -> None:
        """Raise BadRequestError for what this generation model cannot do."""

    def image_refusal(self) -> str | None:
        """Why this generation model takes no images, or None when it does."""
        return "this request format sends no images"

    def inputs(self, request: GenerationRequest) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def requested_outputs(self, request: GenerationRequest) -> list[str]:
        raise NotImplementedError

    def parse(self, outputs: dict[str, np.ndarray]) -> GenerationOutput:
        raise NotImplementedError

    def decoder(self, request: GenerationRequest) -> Decoder:
        return Decoder(self, request)
