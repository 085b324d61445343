"""The `openai_embeddings` Triton model: the chat models' glue (`OpenAIModel`: execute, the
instance's event loop, transports, the sender) around `EmbeddingService`. Each input is one
call of the vLLM backend's embedding interface, read as one "choice" of the request; the sender
sends the one response once every input's vector is in."""

from __future__ import annotations

from ..embeddings import EmbeddingService
from .model import OpenAIModel


class OpenAIEmbeddingsModel(OpenAIModel):
    """`openai_embeddings`: OpenAI embeddings (`POST /v1/embeddings`)."""

    service_class = EmbeddingService
