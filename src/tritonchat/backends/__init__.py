"""Request formats of the generation models `openai_chat` can call through BLS."""

from .base import GenerationOutput, GenerationRequest, RequestFormat, TokenLogprob
from .vllm import VllmFormat

FORMATS: dict[str, type[RequestFormat]] = {VllmFormat.name: VllmFormat}

__all__ = ["FORMATS", "GenerationOutput", "GenerationRequest", "RequestFormat", "TokenLogprob", "VllmFormat"]
