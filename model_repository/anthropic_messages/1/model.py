"""Triton entry point of `anthropic_messages`; all logic lives in the installed `tritonchat` package."""

from tritonchat.triton import AnthropicMessagesModel


class TritonPythonModel(AnthropicMessagesModel):
    """Anthropic Messages in front of a generation model (see `config.pbtxt` and docs/api.md)."""
