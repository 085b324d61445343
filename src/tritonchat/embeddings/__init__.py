"""OpenAI's embeddings API (`POST /v1/embeddings`) on Triton's vLLM backend, served by the
`openai_embeddings` model:

    target.py     the vLLM backend's `embedding_request` interface (one call per input)
    response.py   the vectors -> OpenAI's embeddings response (floats or base64)
    service.py    EmbeddingService: request -> checked, tokenized inputs -> calls and builder

The request itself is in `tritonchat.protocol.embeddings` (layer 0, beside the other requests).
"""

from .response import EmbeddingsBuilder
from .service import EmbeddingService

__all__ = ["EmbeddingService", "EmbeddingsBuilder"]
