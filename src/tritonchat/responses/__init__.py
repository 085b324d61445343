"""OpenAI's Responses API (`POST /v1/responses`) on the chat pipeline, served by the
`openai_responses` model:

    translate.py   the Responses request as the chat request that plans it
    events.py      generation outputs -> the `response` object and its stream events
    service.py     ResponsesService: the chat service with that request and that answer

The request itself is in `tritonchat.protocol.responses` (layer 0, beside the other requests).
"""

from .events import ResponsesBuilder
from .service import ResponsesService

__all__ = ["ResponsesBuilder", "ResponsesService"]
