"""Triton entry point of `openai_embeddings`; all logic lives in the installed `tritonchat` package."""

from tritonchat.triton import OpenAIEmbeddingsModel


class TritonPythonModel(OpenAIEmbeddingsModel):
    """OpenAI embeddings in front of a vLLM embedding model (see `config.pbtxt` and docs/api.md)."""
