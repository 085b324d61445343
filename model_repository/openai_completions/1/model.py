"""Triton entry point of `openai_completions`; all logic lives in the installed `tritonchat` package."""

from tritonchat.triton import OpenAICompletionsModel


class TritonPythonModel(OpenAICompletionsModel):
    """OpenAI (legacy) Completions in front of a generation model (see `config.pbtxt` and README)."""
