"""Triton glue: model lifecycle, response sending and error codes, and the BLS transport.

The only code that imports `triton_python_backend_utils` (lazily: it exists only inside
Triton's Python stub). Everything else, request to response, is in the Triton-free modules
around it (see `tritonchat.service`).
"""

from .embeddings import OpenAIEmbeddingsModel
from .model import AnthropicMessagesModel, OpenAIChatModel, OpenAICompletionsModel, OpenAIResponsesModel

__all__ = ["AnthropicMessagesModel", "OpenAIChatModel", "OpenAICompletionsModel", "OpenAIEmbeddingsModel",
           "OpenAIResponsesModel"]
