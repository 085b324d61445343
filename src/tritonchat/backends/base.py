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
    # Sampling settings under vLLM's SamplingParams names (temperature, top_p, seed, stop, ...).
    sampling: dict[str, Any] = field(default_factory=dict)
    lora_name: str | None = None


@dataclass
class GenerationOutput:
    """What one backend response added to a choice."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int = 0

    def merge(self, later: GenerationOutput) -> GenerationOutput:
        """This output followed by `later`, as if the backend had sent them as one."""
        return GenerationOutput(
            text=self.text + later.text,
            finish_reason=later.finish_reason or self.finish_reason,
            prompt_tokens=later.prompt_tokens if later.prompt_tokens is not None else self.prompt_tokens,
            completion_tokens=self.completion_tokens + later.completion_tokens,
        )


class RequestFormat:
    """Maps a `GenerationRequest` to a generation model's input tensors, and its outputs back."""

    name = ""
    # Whether the last response of every generation says why it stopped.
    reports_finish_reason = False

    def inputs(self, request: GenerationRequest) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def requested_outputs(self, request: GenerationRequest) -> list[str]:
        raise NotImplementedError

    def parse(self, outputs: dict[str, np.ndarray]) -> GenerationOutput:
        raise NotImplementedError
