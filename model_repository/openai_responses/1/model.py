"""Triton entry point of `openai_responses`; all logic lives in the installed `tritonchat` package."""

from tritonchat.triton import OpenAIResponsesModel


class TritonPythonModel(OpenAIResponsesModel):
    """OpenAI Responses in front of a generation model (see `config.pbtxt` and docs/api.md)."""
