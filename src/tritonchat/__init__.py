"""OpenAI Chat Completions served from NVIDIA Triton through a decoupled Python BLS model."""

__version__ = "0.1.0"
