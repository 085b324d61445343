"""Tool-call and reasoning parsers: generated text in, structured deltas out.

    reasoning = get_reasoning_parser("qwen3")(starts_in_reasoning=prompt_opened_think)
    tools = get_tool_parser("hermes")(tools=request_tools)
    for piece in generated_pieces:
        thought = reasoning.feed(piece)
        found = tools.feed(thought.content)  # tool calls are read from the content only
        # send thought.reasoning, found.content and found.tool_calls
    thought = reasoning.finish()
    found = tools.feed(thought.content), tools.finish()  # send these too

Every parser gives the same final result however the text is split into pieces, and
`parse(text)` gives that result for a whole text.

Tool-call `arguments` are the model's own text of the arguments object (JSON formats) or
`json.dumps(..., ensure_ascii=False)` of the converted literals (pythonic); the streamed
fragments of a call add up to exactly its final `arguments`. See each module for what it
accepts and what it does with text that is not a call.
"""

from .base import (
    REASONING_PARSERS,
    TOOL_PARSERS,
    Delta,
    ReasoningParser,
    ToolCall,
    ToolCallDelta,
    ToolParser,
    get_reasoning_parser,
    get_tool_parser,
    register_reasoning_parser,
    register_tool_parser,
)

from . import reasoning, tool_calls  # noqa: E402,F401  (importing them registers the parsers)
from . import harmony  # noqa: E402,F401  (gpt-oss: tool parser "openai", reasoning parser "openai_gptoss")

__all__ = [
    "REASONING_PARSERS",
    "TOOL_PARSERS",
    "Delta",
    "ReasoningParser",
    "ToolCall",
    "ToolCallDelta",
    "ToolParser",
    "get_reasoning_parser",
    "get_tool_parser",
    "register_reasoning_parser",
    "register_tool_parser",
]
