"""Triton entry point of `openai_chat`; all logic lives in the installed `tritonchat` package."""

from tritonchat.triton import OpenAIChatModel


class TritonPythonModel(OpenAIChatModel):
    """OpenAI Chat Completions in front of a generation model (see `config.pbtxt` and README)."""
