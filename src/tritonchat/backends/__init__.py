"""Request formats of the generation models `openai_chat` can call."""

from .base import Decoder, FormatOptions, GenerationOutput, GenerationRequest, RequestFormat, TokenLogprob
from .trtllm import TensorRtLlmFormat, TrtllmFormat
from .vllm import VllmFormat

FORMATS: dict[str, type[RequestFormat]] = {
    VllmFormat.name: VllmFormat,
    TrtllmFormat.name: TrtllmFormat,
    TensorRtLlmFormat.name: TensorRtLlmFormat,
}

__all__ = [
    "FORMATS",
    "Decoder",
    "FormatOptions",
    "GenerationOutput",
    "GenerationRequest",
    "RequestFormat",
    "TensorRtLlmFormat",
    "TokenLogprob",
    "TrtllmFormat",
    "VllmFormat",
]
