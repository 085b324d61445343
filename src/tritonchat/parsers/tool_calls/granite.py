"""IBM Granite 3.x tool calls: a marker, then a JSON array of calls.

    Let me check.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Oslo"}},
                                {"name": "get_time", "arguments": {}}]

- Granite 3.0 writes `<|tool_call|>`, a special token (the server must keep it:
  skip_special_tokens=False); Granite 3.1 and later write the plain text `<tool_call>`.
  Both are accepted.
- After the marker: an array of `{"name": ..., "arguments": {...}}` objects (see
  json_array.py); a single object without the array is accepted too. Several marked
  arrays in a row are read one after the other.
- Text before the marker is content; so is text after the array, except whitespace alone.
- What follows a marker and is not a call is released as content, marker included.
  Announced calls stay calls; their arguments are what the model wrote (see hermes.py).
"""

from __future__ import annotations

from ..base import register_tool_parser
from .json_array import JsonCallsAfterMarker

TOOL_CALL_TOKEN = "<|tool_call|>"  # Granite 3.0
TOOL_CALL_TEXT = "<tool_call>"  # Granite 3.1 and later


@register_tool_parser("granite")
class GraniteToolParser(JsonCallsAfterMarker):
    open_tags = (TOOL_CALL_TOKEN, TOOL_CALL_TEXT)
    needs_special_tokens = True  # <|tool_call|> is a special token of Granite 3.0
