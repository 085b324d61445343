"""OpenAI Chat Completions served from NVIDIA Triton by a decoupled Python-backend model."""

__version__ = "0.1.0"
