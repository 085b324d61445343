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
    tools: list[dict] = field(default_factory=list)  # the request's tools, where the parser reads them

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


def arguments_fed_by_character(parser: ToolParser, text: str) -> dict[int, str]:
    """Feeds `text` one character at a time, asserting that what was sent of each call's
    arguments is always text the model already wrote (nothing is autocompleted); returns the
    arguments sent, by call index."""
    fed, sent = "", {}
    for character in text:
        fed += character
        for piece in parser.feed(character).tool_calls:
            sent[piece.index] = sent.get(piece.index, "") + piece.arguments
            assert sent[piece.index] in fed
    parser.finish()
    return sent


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

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "hours": {"type": "array", "items": {"type": "integer"}},
                    "options": {"type": "object"},
                    "offset": {"type": "number"},
                    "note": {"type": ["string", "null"]},
                },
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]

QWEN3_CODER_SAMPLES = [
    Sample(
        "qwen3-coder single call",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
        None,
        [("get_weather", '{"city": "Oslo"}')],
        WEATHER_TOOLS,
    ),
    Sample(
        "text before, parameters converted by the schema",
        "I'll check the forecast.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n"
        "<parameter=hours>\n[6, 12]\n</parameter>\n<parameter=options>\n{\"unit\": \"C\"}\n</parameter>\n"
        "<parameter=offset>\n-1.5\n</parameter>\n<parameter=note>\nnull\n</parameter>\n</function>\n</tool_call>",
        "I'll check the forecast.\n",
        [
            (
                "get_weather",
                '{"city": "Oslo", "days": 3, "metric": true, "hours": [6, 12], "options": {"unit": "C"}, '
                '"offset": -1.5, "note": null}',
            )
        ],
        WEATHER_TOOLS,
    ),
    Sample(
        "parallel calls, unicode and multi-line values",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\n東京 🌧 \"Zürich\"\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.py\n</parameter>\n"
        "<parameter=content>\ndef f(x):\n    return x < 3 and {'a': \"\\n\"}\n\n</parameter>\n</function>\n</tool_call>",
        None,
        [
            ("get_weather", '{"city": "東京 🌧 \\"Zürich\\""}'),
            ("write_file", '{"path": "src/a.py", "content": "def f(x):\\n    return x < 3 and {\'a\': \\"\\\\n\\"}\\n"}'),
        ],
        WEATHER_TOOLS,
    ),
    Sample(
        "empty arguments",
        "<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
        None,
        [("get_time", "{}")],
        WEATHER_TOOLS,
    ),
    Sample(
        "no call, text with tag-like pieces",
        "Write <parameter> or <function> tags in XML; a <tool_call is not one.",
        "Write <parameter> or <function> tags in XML; a <tool_call is not one.",
    ),
]

DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def deepseek_v3_call(name: str, arguments: str) -> str:
    return f"{DS_CALL_BEGIN}function{DS_SEP}{name}\n```json\n{arguments}\n```{DS_CALL_END}"


def deepseek_v31_call(name: str, arguments: str) -> str:
    return f"{DS_CALL_BEGIN}{name}{DS_SEP}{arguments}{DS_CALL_END}"


DEEPSEEK_V3_SAMPLES = [
    Sample(
        "deepseek-v3 single call",
        f"{DS_CALLS_BEGIN}{deepseek_v3_call('get_weather', WEATHER)}{DS_CALLS_END}",
        None,
        [("get_weather", WEATHER)],
    ),
    Sample(
        "r1 text before, parallel calls",
        f"I'll look up both.\n\n{DS_CALLS_BEGIN}{deepseek_v3_call('get_weather', WEATHER)}\n"
        f"{deepseek_v3_call('get_temperature_date', DATED)}{DS_CALLS_END}",
        "I'll look up both.\n\n",
        [("get_weather", WEATHER), ("get_temperature_date", DATED)],
    ),
    Sample(
        "unicode and nested arguments",
        f"{DS_CALLS_BEGIN}{deepseek_v3_call('get_weather', UNICODE)}{deepseek_v3_call('search', NESTED)}{DS_CALLS_END}",
        None,
        [("get_weather", UNICODE), ("search", NESTED)],
    ),
    Sample(
        "empty arguments",
        f"{DS_CALLS_BEGIN}{deepseek_v3_call('get_time', '{}')}{DS_CALLS_END}",
        None,
        [("get_time", "{}")],
    ),
    Sample("no call", "DeepSeek's markers look like <｜this｜>.", "DeepSeek's markers look like <｜this｜>."),
]

DEEPSEEK_V31_SAMPLES = [
    Sample(
        "deepseek-v3.1 single call",
        f"{DS_CALLS_BEGIN}{deepseek_v31_call('get_weather', WEATHER)}{DS_CALLS_END}",
        None,
        [("get_weather", WEATHER)],
    ),
    Sample(
        "text before, parallel calls",
        f"I'll look up both.\n\n{DS_CALLS_BEGIN}{deepseek_v31_call('get_weather', WEATHER)}"
        f"{deepseek_v31_call('get_temperature_date', DATED)}{DS_CALLS_END}",
        "I'll look up both.\n\n",
        [("get_weather", WEATHER), ("get_temperature_date", DATED)],
    ),
    Sample(
        "unicode and nested arguments",
        f"{DS_CALLS_BEGIN}{deepseek_v31_call('get_weather', UNICODE)}{deepseek_v31_call('search', NESTED)}{DS_CALLS_END}",
        None,
        [("get_weather", UNICODE), ("search", NESTED)],
    ),
    Sample(
        "empty arguments",
        f"{DS_CALLS_BEGIN}{deepseek_v31_call('get_time', '{}')}{DS_CALLS_END}",
        None,
        [("get_time", "{}")],
    ),
    Sample("no call", "DeepSeek's markers look like <｜this｜>.", "DeepSeek's markers look like <｜this｜>."),
]

KIMI_SECTION_BEGIN, KIMI_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
KIMI_CALL_BEGIN, KIMI_CALL_END, KIMI_ARGUMENTS = "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>"


def kimi_call(call_id: str, arguments: str) -> str:
    return f"{KIMI_CALL_BEGIN}{call_id}{KIMI_ARGUMENTS}{arguments}{KIMI_CALL_END}"


KIMI_K2_SAMPLES = [
    Sample(
        "kimi-k2 single call",
        f"{KIMI_SECTION_BEGIN}{kimi_call('functions.get_weather:0', WEATHER)}{KIMI_SECTION_END}",
        None,
        [("get_weather", WEATHER)],
    ),
    Sample(
        "text before, parallel calls on their own lines",
        f"Let me check both.{KIMI_SECTION_BEGIN}\n{kimi_call('functions.get_weather:0', WEATHER)}\n"
        f"{kimi_call('functions.get_temperature_date:1', DATED)}\n{KIMI_SECTION_END}",
        "Let me check both.",
        [("get_weather", WEATHER), ("get_temperature_date", DATED)],
    ),
    Sample(
        "unicode and nested arguments, dotted name",
        f"{KIMI_SECTION_BEGIN}{kimi_call('functions.get_weather:2', UNICODE)}"
        f"{kimi_call('functions.web.search:3', NESTED)}{KIMI_SECTION_END}",
        None,
        [("get_weather", UNICODE), ("web.search", NESTED)],
    ),
    Sample(
        "empty arguments",
        f"{KIMI_SECTION_BEGIN}{kimi_call('functions.get_time:0', '{}')}{KIMI_SECTION_END}",
        None,
        [("get_time", "{}")],
    ),
    Sample("no call", "Kimi uses <|tool_calls|> nowhere.", "Kimi uses <|tool_calls|> nowhere."),
]

GRANITE_SAMPLES = [
    Sample(
        "granite 3.0 single call",
        f'<|tool_call|>[{{"name": "get_weather", "arguments": {WEATHER}}}]',
        None,
        [("get_weather", WEATHER)],
    ),
    Sample(
        "granite 3.1 plain-text marker",
        f'<tool_call>[{{"name": "get_weather", "arguments": {WEATHER}}}]',
        None,
        [("get_weather", WEATHER)],
    ),
    Sample(
        "text before, parallel calls, arguments first",
        f'Let me check both.<|tool_call|>[{{"arguments": {WEATHER}, "name": "get_weather"}}, '
        f'{{"name": "get_temperature_date", "arguments": {DATED}}}]',
        "Let me check both.",
        [("get_weather", WEATHER), ("get_temperature_date", DATED)],
    ),
    Sample(
        "unicode and nested arguments",
        f'<|tool_call|>[{{"name": "get_weather", "arguments": {UNICODE}}}, {{"name": "search", "arguments": {NESTED}}}]',
        None,
        [("get_weather", UNICODE), ("search", NESTED)],
    ),
    Sample(
        "empty arguments",
        '<|tool_call|>[{"name": "get_time", "arguments": {}}]',
        None,
        [("get_time", "{}")],
    ),
    Sample("no call", "Granite writes [lists] and {sets} too.", "Granite writes [lists] and {sets} too."),
]

LLAMA4_PYTHONIC_SAMPLES = [
    Sample(
        "llama 4 wrapped call",
        '<|python_start|>[get_weather(city="San Francisco, CA, USA")]<|python_end|>',
        None,
        [("get_weather", WEATHER.replace("location", "city"))],
    ),
    Sample(
        "parallel calls without the wrapper",
        "[get_weather(city='Oslo', days=3), get_time(tz='Europe/Oslo')]",
        None,
        [("get_weather", '{"city": "Oslo", "days": 3}'), ("get_time", '{"tz": "Europe/Oslo"}')],
    ),
    Sample(
        "unicode and nested literals",
        '<|python_start|>[create_event(title="Møte 🎉", attendees=["åse", "Bjørn"], options={"remind": True})]'
        "<|python_end|>",
        None,
        [("create_event", '{"title": "Møte 🎉", "attendees": ["åse", "Bjørn"], "options": {"remind": true}}')],
    ),
    Sample("empty arguments", "[get_time()]", None, [("get_time", "{}")]),
    Sample("no call", "Llama 4 answers in [brackets] sometimes.", "Llama 4 answers in [brackets] sometimes."),
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
    if parser_name in ("pythonic", "llama4_pythonic"):
        calls = [(name.replace(".", "_"), arguments) for name, arguments in calls]
        if not calls:
            return prose + "no tools needed", prose + "no tools needed", []
        rendered = ", ".join(
            f"{name}({', '.join(f'{key}={value!r}' for key, value in arguments.items())})" for name, arguments in calls
        )
        if parser_name == "llama4_pythonic" and rng.random() < 0.5:
            return f"<|python_start|>[{rendered}]<|python_end|>", None, calls
        return f"[{rendered}]", None, calls
    if not calls:
        return prose + "No tools needed.", prose + "No tools needed.", []
    if parser_name == "qwen3_coder":  # without tools in the request every value is a string
        calls = [
            (name, {key: value if isinstance(value, str) else json.dumps(value) for key, value in arguments.items()})
            for name, arguments in calls
        ]
        bodies = [
            f"<tool_call>\n<function={name}>\n"
            + "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in arguments.items())
            + "</function>\n</tool_call>"
            for name, arguments in calls
        ]
        return prose + "\n".join(bodies), prose or None, calls
    if parser_name == "deepseek_v3":
        bodies = [deepseek_v3_call(name, random_json(rng, arguments)) for name, arguments in calls]
        return prose + DS_CALLS_BEGIN + "\n".join(bodies) + DS_CALLS_END, prose or None, calls
    if parser_name == "deepseek_v31":
        bodies = [deepseek_v31_call(name, random_json(rng, arguments)) for name, arguments in calls]
        return prose + DS_CALLS_BEGIN + "".join(bodies) + DS_CALLS_END, prose or None, calls
    if parser_name == "kimi_k2":
        bodies = [
            kimi_call(f"functions.{name}:{index}", random_json(rng, arguments))
            for index, (name, arguments) in enumerate(calls)
        ]
        return prose + KIMI_SECTION_BEGIN + "\n".join(bodies) + KIMI_SECTION_END, prose or None, calls
    if parser_name == "granite":
        array = [{"name": name, "arguments": arguments} for name, arguments in calls]
        return prose + rng.choice(["<|tool_call|>", "<tool_call>"]) + random_json(rng, array), prose or None, calls
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
