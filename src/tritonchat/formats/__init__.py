"""Request formats of the generation models `openai_chat` can call."""

from .base import Decoder, FormatOptions, GenerationOutput, GenerationRequest, RequestFormat, TargetCall, TokenLogprob
from .llmapi import LlmApiFormat
from .tensorrt_llm import TensorRtLlmFormat, EnsembleFormat
from .vllm import VllmFormat

FORMATS: dict[str, type[RequestFormat]] = {
    VllmFormat.name: VllmFormat,
    EnsembleFormat.name: EnsembleFormat,
    TensorRtLlmFormat.name: TensorRtLlmFormat,
    LlmApiFormat.name: LlmApiFormat,
}

__all__ = [
    "FORMATS",
    "Decoder",
    "FormatOptions",
    "GenerationOutput",
    "GenerationRequest",
    "LlmApiFormat",
    "RequestFormat",
    "TargetCall",
    "TensorRtLlmFormat",
    "TokenLogprob",
    "EnsembleFormat",
    "VllmFormat",
]
