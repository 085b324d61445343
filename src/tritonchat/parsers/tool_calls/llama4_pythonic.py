"""Llama 4 pythonic tool calls: the `pythonic` format, optionally wrapped in
`<|python_start|>` ... `<|python_end|>`.

    [get_weather(city="Oslo"), get_time(tz="Europe/Oslo")]
    <|python_start|>[get_weather(city="Oslo")]<|python_end|>

Registered under vLLM's name for it; the `pythonic` parser already reads the wrapper, so
the two behave the same (see pythonic.py). The wrapper tags are special tokens, but the
calls are found with or without them, so the server need not keep special tokens.
"""

from __future__ import annotations

from ..base import register_tool_parser
from .pythonic import PythonicToolParser


@register_tool_parser("llama4_pythonic")
class Llama4PythonicToolParser(PythonicToolParser):
    pass
