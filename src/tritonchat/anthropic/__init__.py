"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`) on the chat
pipeline, served by the `anthropic_messages` model:

    translate.py   the Messages request as the chat request that plans it
    events.py      generation outputs -> Anthropic's `message` and its stream events
    service.py     AnthropicService: the chat service with that request and that answer

The request itself and Anthropic's errors are in `tritonchat.protocol.anthropic` (layer 0, so
that the clients read the same error table).
"""

from .events import MessageBuilder
from .service import AnthropicService

__all__ = ["AnthropicService", "MessageBuilder"]
