"""Realistic model outputs for the parser tests, and helpers to stream them in pieces."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from tritonchat.parsers import Delta, ToolCall, ToolParser

RANDOM_SPLITTINGS = 24


@dataclass(frozen=True)
class Sample:
    name: str
    text: str
    content: str | None
    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, exact arguments text)

    def __str__(self) -> str:
        return self.name


def splittings(text: str, count: int = RANDOM_SPLITTINGS, seed: int = 0) -> list[list[str]]:
    """The text whole, one character at a time, and in `count` random splittings (fixed seeds)."""
    result = [[text], list(text)]
    for number in range(count):
        rng = random.Random(seed * 1000 + number)
        longest = rng.choice((2, 4, 8, 16))
        pieces, position = [], 0
        while position < len(text):
            size = rng.randint(1, longest)
            pieces.append(text[position : position + size])
            position += size
        result.append(pieces)
    return result


def split_description(pieces: list[str]) -> str:
    return f"{len(pieces)} pieces: {pieces[:12]!r}{'...' if len(pieces) > 12 else ''}"


@dataclass
class Streamed:
    content: str
    calls: list[ToolCall]  # reassembled from the deltas alone
    deltas: list[Delta]


def stream_tool_parser(parser: ToolParser, pieces: list[str]) -> Streamed:
    """Feed the pieces, then finish; check the streaming layout and reassemble the calls."""
    deltas = [parser.feed(piece) for piece in pieces] + [parser.finish()]
    calls: list[ToolCall] = []
    for delta in deltas:
        for piece in delta.tool_calls:
            if piece.index == len(calls):  # the first delta of a new call
                assert piece.id and piece.name, f"first delta of call {piece.index} lacks id or name: {piece}"
                calls.append(ToolCall(id=piece.id, name=piece.name, arguments=piece.arguments))
            else:
                assert piece.index < len(calls), f"index {piece.index} skips ahead of {len(calls)} calls"
                assert piece.id is None and piece.name is None, f"later delta repeats id or name: {piece}"
                calls[piece.index].arguments += piece.arguments
    assert calls == parser.calls, "the deltas do not add up to the parser's own record of the calls"
    return Streamed("".join(delta.content for delta in deltas), calls, deltas)


def call_summary(calls: list[ToolCall]) -> list[tuple[str, str]]:
    return [(call.name, call.arguments) for call in calls]


def json_call_summary(calls) -> list[tuple[str, object]]:
    """(name, arguments parsed as JSON) for our calls or vLLM's."""
    result = []
    for call in calls:
        function = getattr(call, "function", call)
        result.append((function.name, json.loads(function.arguments)))
    return result


WEATHER = '{"location": "San Francisco, CA, USA"}'
DATED = '{"location": "San Francisco, CA, USA", "date": "2024-10-01"}'
NESTED = (
    '{"query": "say \\"hi\\" {not} [a, b] </tool", "filters": {"range": {"min": -1.5e3, "max": null}, '
    '"tags": ["x,y", "}"]}, "exact": true}'
)
UNICODE = '{"city": "Zürich", "note": "日本語 🌧 — \\u00e9"}'

HERMES_SAMPLES = [
    Sample(
        "qwen2.5 single call",
        f'<tool_call>\n{{"name": "get_current_temperature", "arguments": {WEATHER}}}\n</tool_call>',
        None,
        [("get_current_temperature", WEATHER)],
    ),
    Sample(
        "qwen2.5 parallel calls",
        f'<tool_call>\n{{"name": "get_current_temperature", "arguments": {WEATHER}}}\n</tool_call>\n'
        f'<tool_call>\n{{"name": "get_temperature_date", "arguments": {DATED}}}\n</tool_call>',
        None,
        [("get_current_temperature", WEATHER), ("get_temperature_date", DATED)],
    ),
    Sample(
        "qwen3 text before calls, unicode",
        "I'll look up the weather in both cities.\n\n"
        f'<tool_call>\n{{"name": "get_weather", "arguments": {UNICODE}}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京"}}\n</tool_call>\n',
        "I'll look up the weather in both cities.\n\n",
        [("get_weather", UNICODE), ("get_weather", '{"city": "東京"}')],
    ),
    Sample(
        "hermes 2 pro, arguments before name",
        '<tool_call>\n{"arguments": {"symbol": "TSLA"}, "name": "get_stock_fundamentals"}\n</tool_call>',
        None,
        [("get_stock_fundamentals", '{"symbol": "TSLA"}')],
    ),
    Sample(
        "nested arguments with escapes and brackets in strings",
        f'<tool_call>\n{{"name": "search", "arguments": {NESTED}}}\n</tool_call>',
        None,
        [("search", NESTED)],
    ),
    Sample(
        "empty arguments, compact",
        '<tool_call>{"name":"get_time","arguments":{}}</tool_call>',
        None,
        [("get_time", "{}")],
    ),
    Sample(
        "no call, text that starts like tags",
        "Use <tool> and <tool_calls> tags sparingly; a <tool_call is not one either.",
        "Use <tool> and <tool_calls> tags sparingly; a <tool_call is not one either.",
    ),
]

LLAMA3_SAMPLES = [
    Sample(
        "llama 3.1 bare json",
        '{"name": "get_current_conditions", "parameters": {"location": "San Francisco, CA", "unit": "Fahrenheit"}}',
        None,
        [("get_current_conditions", '{"location": "San Francisco, CA", "unit": "Fahrenheit"}')],
    ),
    Sample(
        "llama 3.1 python_tag",
        '<|python_tag|>{"name": "get_current_conditions", "parameters": {"location": "Oslo", "unit": "Celsius"}}',
        None,
        [("get_current_conditions", '{"location": "Oslo", "unit": "Celsius"}')],
    ),
    Sample(
        "several calls separated by ;",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}; '
        '{"name": "get_time", "parameters": {}}',
        None,
        [("get_weather", '{"city": "Oslo"}'), ("get_time", "{}")],
    ),
    Sample(
        "llama 3.2 with type key, unicode",
        '{"type": "function", "name": "search", "parameters": {"query": "München → Zürich", "max": 3}}',
        None,
        [("search", '{"query": "München → Zürich", "max": 3}')],
    ),
    Sample(
        "arguments key, nested",
        f'{{"name": "search", "arguments": {NESTED}}}',
        None,
        [("search", NESTED)],
    ),
    Sample("no call", "The capital of France is Paris.", "The capital of France is Paris."),
]

MISTRAL_SAMPLES = [
    Sample(
        "mistral v3 array",
        '[TOOL_CALLS] [{"name": "get_current_weather", '
        '"arguments": {"location": "Paris, France", "format": "celsius"}}]',
        None,
        [("get_current_weather", '{"location": "Paris, France", "format": "celsius"}')],
    ),
    Sample(
        "mistral v3 parallel, text before",
        'Let me check both.[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris"}}, '
        f'{{"name": "get_current_weather", "arguments": {UNICODE}}}]',
        "Let me check both.",
        [("get_current_weather", '{"location": "Paris"}'), ("get_current_weather", UNICODE)],
    ),
    Sample(
        "mistral v3 empty arguments",
        '[TOOL_CALLS][{"name": "get_time", "arguments": {}}]',
        None,
        [("get_time", "{}")],
    ),
    Sample("no call", "Bonjour ! [TOOL is not a marker.", "Bonjour ! [TOOL is not a marker."),
]

MISTRAL_V11_SAMPLES = [
    Sample(
        "mistral v11 single",
        '[TOOL_CALLS]get_current_weather[ARGS]{"location": "Paris, France", "format": "celsius"}',
        None,
        [("get_current_weather", '{"location": "Paris, France", "format": "celsius"}')],
    ),
    Sample(
        "mistral v11 parallel, nested",
        f'Checking.[TOOL_CALLS]search[ARGS]{NESTED}[TOOL_CALLS]get_time[ARGS]{{}}',
        "Checking.",
        [("search", NESTED), ("get_time", "{}")],
    ),
]

PYTHONIC_SAMPLES = [
    Sample(
        "llama 3.2 parallel calls",
        "[get_weather(city='San Francisco', metric='celsius'), get_weather(city='Seattle', metric='celsius')]",
        None,
        [
            ("get_weather", '{"city": "San Francisco", "metric": "celsius"}'),
            ("get_weather", '{"city": "Seattle", "metric": "celsius"}'),
        ],
    ),
    Sample(
        "strings with commas, brackets and quotes",
        """[search(query="a, b [c] (d) \\"e\\" 'f' )]", limit=5, exact=False)]""",
        None,
        [("search", """{"query": "a, b [c] (d) \\"e\\" 'f' )]", "limit": 5, "exact": false}""")],
    ),
    Sample(
        "nested literals and unicode",
        '[create_event(title="Møte i Oslo 🎉", attendees=["åse", "Bjørn"], '
        'options={"remind": True, "minutes": [5, 15], "place": None}, offset=-2.5, size=(800, 600))]',
        None,
        [
            (
                "create_event",
                '{"title": "Møte i Oslo 🎉", "attendees": ["åse", "Bjørn"], '
                '"options": {"remind": true, "minutes": [5, 15], "place": null}, "offset": -2.5, "size": [800, 600]}',
            )
        ],
    ),
    Sample("empty arguments", "[get_time()]", None, [("get_time", "{}")]),
    Sample(
        "multi-line list",
        '[\n    get_weather(city="Oslo"),\n    get_time(tz="Europe/Oslo")\n]',
        None,
        [("get_weather", '{"city": "Oslo"}'), ("get_time", '{"tz": "Europe/Oslo"}')],
    ),
    Sample("no call", "I don't need any tools for that.", "I don't need any tools for that."),
]


# Generated outputs, for the fuzz tests.

_STRING_CHARACTERS = "aZ 09,:;{}[]()\"'\\/\n\té日🌧<>-."
_NAMES = ["get_weather", "search", "now", "a", "tools.lookup"]


def random_value(rng: random.Random, depth: int = 0) -> object:
    kinds = ["str", "int", "float", "bool", "null"] + (["list", "dict"] * 2 if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "str":
        return "".join(rng.choice(_STRING_CHARACTERS) for _ in range(rng.randint(0, 8)))
    if kind == "int":
        return rng.choice([0, -1, 7, 12345, -98765432109])
    if kind == "float":
        return rng.choice([0.5, -2.25, 1e-7, 3.0e21, -0.0])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{index}": random_value(rng, depth + 1) for index in range(rng.randint(0, 3))}


def random_arguments(rng: random.Random) -> dict:
    return {f"arg_{index}": random_value(rng) for index in range(rng.randint(0, 4))}


def random_json(rng: random.Random, value: object) -> str:
    """JSON text in one of the layouts models use."""
    style = rng.choice(["spaced", "compact", "indented", "ascii"])
    if style == "compact":
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if style == "indented":
        return json.dumps(value, ensure_ascii=False, indent=2)
    return json.dumps(value, ensure_ascii=style == "ascii")


def random_tool_output(rng: random.Random, parser_name: str) -> tuple[str, str | None, list[tuple[str, object]]]:
    """(text, expected content, expected calls as (name, arguments object)) in the parser's format."""
    calls = [(rng.choice(_NAMES), random_arguments(rng)) for _ in range(rng.randint(0, 3))]
    prose = rng.choice(["", "Sure, let me check.\n\n", "Un moment… ", "a <b> [c] {d} "])
    if parser_name == "pythonic":
        calls = [(name.replace(".", "_"), arguments) for name, arguments in calls]
        if not calls:
            return prose + "no tools needed", prose + "no tools needed", []
        rendered = ", ".join(
            f"{name}({', '.join(f'{key}={value!r}' for key, value in arguments.items())})" for name, arguments in calls
        )
        return f"[{rendered}]", None, calls
    if not calls:
        return prose + "No tools needed.", prose + "No tools needed.", []
    if parser_name == "llama3_json":
        bodies = [random_json(rng, {"name": name, "parameters": arguments}) for name, arguments in calls]
        return rng.choice(["", "<|python_tag|>"]) + "; ".join(bodies), None, calls
    if parser_name == "mistral":
        if rng.random() < 0.5:  # v11 and later
            text = "".join(f"[TOOL_CALLS]{name}[ARGS]{random_json(rng, arguments)}" for name, arguments in calls)
        else:
            array = [{"name": name, "arguments": arguments} for name, arguments in calls]
            text = "[TOOL_CALLS] " + random_json(rng, array)
        return prose + text, prose or None, calls
    bodies = [
        f"<tool_call>\n{random_json(rng, {'name': name, 'arguments': arguments})}\n</tool_call>"
        for name, arguments in calls
    ]
    return prose + "\n".join(bodies), prose or None, calls


def mutate(rng: random.Random, text: str) -> str:
    """A damaged copy of `text`: cut short, a character dropped, or a stray character added."""
    position = rng.randint(0, len(text))
    mutation = rng.choice(["cut", "drop", "insert", "insert"])
    if mutation == "cut":
        return text[:position]
    if mutation == "drop":
        return text[:position] + text[position + 1 :]
    return text[:position] + rng.choice('{}"[],;:\'()<> x1-.\n') + text[position:]


def whole_tools(parser, text: str):
    """(content or None, calls) of a whole text: one feed, then finish."""
    content = parser.feed(text).content + parser.finish().content
    return content or None, parser.calls


def whole_reasoning(parser, text: str):
    """(reasoning or None, content or None) of a whole text: one feed, then finish."""
    first, last = parser.feed(text), parser.finish()
    return (first.reasoning + last.reasoning) or None, (first.content + last.content) or None
