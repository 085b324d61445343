"""Tool-call parsers: realistic outputs fed whole, char by char and in random splittings.

Every case checks the same invariants: the streaming layout (first delta of a call has
index, id and the complete name; later ones only argument fragments; indices count up),
fragments adding up to the final arguments, and the final result being the same for
every splitting and equal to `parse(text)`.
"""

from __future__ import annotations

import json
import random
import re

import pytest

from tritonchat.parsers import TOOL_PARSERS, Delta, get_tool_parser

from .samples import (
    arguments_fed_by_character,
    DEEPSEEK_V3_SAMPLES,
    DEEPSEEK_V31_SAMPLES,
    GRANITE_SAMPLES,
    HERMES_SAMPLES,
    KIMI_K2_SAMPLES,
    LLAMA3_SAMPLES,
    LLAMA4_PYTHONIC_SAMPLES,
    MISTRAL_SAMPLES,
    MISTRAL_V11_SAMPLES,
    PYTHONIC_SAMPLES,
    QWEN3_CODER_SAMPLES,
    WEATHER_TOOLS,
    Sample,
    call_summary,
    json_call_summary,
    mutate,
    random_tool_output,
    split_description,
    whole_tools,
    splittings,
    stream_tool_parser,
)

SAMPLES = (
    [("hermes", sample) for sample in HERMES_SAMPLES]
    + [("llama3_json", sample) for sample in LLAMA3_SAMPLES]
    + [("mistral", sample) for sample in MISTRAL_SAMPLES + MISTRAL_V11_SAMPLES]
    + [("pythonic", sample) for sample in PYTHONIC_SAMPLES]
    + [("qwen3_coder", sample) for sample in QWEN3_CODER_SAMPLES]
    + [("deepseek_v3", sample) for sample in DEEPSEEK_V3_SAMPLES]
    + [("deepseek_v31", sample) for sample in DEEPSEEK_V31_SAMPLES]
    + [("kimi_k2", sample) for sample in KIMI_K2_SAMPLES]
    + [("granite", sample) for sample in GRANITE_SAMPLES]
    + [("llama4_pythonic", sample) for sample in LLAMA4_PYTHONIC_SAMPLES]
)
PARSER_NAMES = [
    "hermes", "llama3_json", "mistral", "pythonic",
    "qwen3_coder", "deepseek_v3", "deepseek_v31", "kimi_k2", "granite", "llama4_pythonic",
]  # fmt: skip
# Formats whose arguments are a slice of the model's text (not converted from another notation).
CONVERTED_ARGUMENTS = {"pythonic", "llama4_pythonic", "qwen3_coder"}
JSON_FORMAT_SAMPLES = [(name, sample) for name, sample in SAMPLES if name not in CONVERTED_ARGUMENTS]


def assert_every_splitting_gives(
    parser_name: str, text: str, content: str | None, calls: list[tuple[str, str]], tools: list[dict] | None = None
):
    parser_class = get_tool_parser(parser_name)
    parsed_content, parsed_calls = whole_tools(parser_class(tools), text)
    assert (parsed_content, call_summary(parsed_calls)) == (content, calls), "parse()"
    for pieces in splittings(text):
        streamed = stream_tool_parser(parser_class(tools), pieces)
        assert (streamed.content or None, call_summary(streamed.calls)) == (content, calls), split_description(pieces)


@pytest.mark.parametrize("parser_name, sample", SAMPLES, ids=[f"{name}: {sample}" for name, sample in SAMPLES])
def test_realistic_output_in_every_splitting(parser_name: str, sample: Sample):
    assert_every_splitting_gives(parser_name, sample.text, sample.content, sample.calls, sample.tools)


@pytest.mark.parametrize(
    "parser_name, sample", JSON_FORMAT_SAMPLES, ids=[f"{name}: {sample}" for name, sample in JSON_FORMAT_SAMPLES]
)
def test_arguments_are_never_ahead_of_the_model(parser_name: str, sample: Sample):
    """Nothing is autocompleted: what was sent of a call's arguments is always text the model already
    wrote, and once fed whole it is each call's arguments exactly."""
    sent = arguments_fed_by_character(get_tool_parser(parser_name)(), sample.text)
    assert sent == {index: arguments for index, (_name, arguments) in enumerate(sample.calls)}


def feed_each(parser_name: str, pieces: list[str]) -> list[Delta]:
    parser = get_tool_parser(parser_name)()
    return [parser.feed(piece) for piece in pieces] + [parser.finish()]


def test_hermes_tag_split_across_pieces_never_leaks():
    deltas = feed_each("hermes", ["Hi <tool_", "call>", '\n{"name": "f", "argu', 'ments": {"a": 1}}\n</tool', "_call>"])
    assert [delta.content for delta in deltas] == ["Hi ", "", "", "", "", ""]
    assert deltas[3].tool_calls[0].name == "f"


def test_hermes_text_that_only_starts_like_a_tag_is_released_once_clear():
    deltas = feed_each("hermes", ["a <tool_", "box> b <", "/tool_call> c"])
    assert [delta.content for delta in deltas] == ["a ", "<tool_box> b ", "</tool_call> c", ""]


def test_hermes_name_is_sent_whole_and_arguments_as_they_come():
    pieces = ['<tool_call>{"name": "get_wea', 'ther", "arguments": {"ci', 'ty": "Os', 'lo"}}</tool_call>']
    deltas = feed_each("hermes", pieces)
    pieces = [piece for delta in deltas for piece in delta.tool_calls]
    assert [(piece.name, piece.arguments) for piece in pieces] == [
        ("get_weather", '{"ci'),
        (None, 'ty": "Os'),
        (None, 'lo"}'),
    ]


def test_mistral_marker_split_across_pieces_never_leaks():
    deltas = feed_each("mistral", ["Ok.[TOOL_", "CALLS]get_", "time[AR", "GS]{}"])
    assert "".join(delta.content for delta in deltas) == "Ok."
    assert [(piece.name, piece.arguments) for delta in deltas for piece in delta.tool_calls] == [("get_time", "{}")]


def test_llama3_python_tag_split_across_pieces_never_leaks():
    deltas = feed_each("llama3_json", ["<|python_", "tag|>", '{"name": "f", "parameters": {}}'])
    assert "".join(delta.content for delta in deltas) == ""
    assert [piece.name for delta in deltas for piece in delta.tool_calls] == ["f"]


def test_pythonic_call_is_sent_when_it_closes():
    deltas = feed_each("pythonic", ["[get_weather(city=", '"Oslo, (Norway)"', ")", ", now(", ")]"])
    sent = [[(piece.name, piece.arguments) for piece in delta.tool_calls] for delta in deltas]
    assert sent == [[], [], [("get_weather", '{"city": "Oslo, (Norway)"}')], [], [("now", "{}")], []]


# Malformed and unusual output: documented behaviour, the same in every splitting.

HERMES_UNUSUAL = [
    (
        "python dict instead of JSON: released as content, tags included",
        "Sure.\n<tool_call>\n{'name': 'get_weather', 'arguments': {'city': 'Oslo'}}\n</tool_call>\nDone.",
        "Sure.\n<tool_call>\n{'name': 'get_weather', 'arguments': {'city': 'Oslo'}}\n</tool_call>\nDone.",
        [],
    ),
    (
        "python dict as arguments: content",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {'city': 'Oslo'}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {'city': 'Oslo'}}\n</tool_call>",
        [],
    ),
    (
        "not JSON at all",
        "<tool_call>get_weather(Oslo)</tool_call>",
        "<tool_call>get_weather(Oslo)</tool_call>",
        [],
    ),
    (
        "invalid JSON after the call was announced: the model's text is kept as the arguments",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo",}}</tool_call>',
        None,
        [("get_weather", '{"city": "Oslo",}}')],
    ),
    (
        "cut off by the token limit: the arguments as far as they got",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Os',
        None,
        [("get_weather", '{"city": "Os')],
    ),
    (
        "</tool_call> was a stop string",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n',
        None,
        [("get_weather", '{"city": "Oslo"}')],
    ),
    (
        "missing arguments are {}",
        '<tool_call>\n{"name": "get_time"}\n</tool_call>',
        None,
        [("get_time", "{}")],
    ),
    (
        "arguments given as a JSON string",
        '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}</tool_call>',
        None,
        [("get_weather", '{"city": "Oslo"}')],
    ),
    (
        "arguments that are not an object: content",
        '<tool_call>{"name": "get_weather", "arguments": ["Oslo"]}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": ["Oslo"]}</tool_call>',
        [],
    ),
    (
        "forgotten </tool_call> before the next call",
        '<tool_call>{"name": "a", "arguments": {}}\n<tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>',
        None,
        [("a", "{}"), ("b", '{"x": 1}')],
    ),
    (
        "a malformed call without its closing tag, then a good one",
        '<tool_call>oops\n<tool_call>{"name": "a", "arguments": {}}</tool_call>',
        "<tool_call>oops\n",
        [("a", "{}")],
    ),
    (
        "text after the calls is content, whitespace alone is not",
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n\n<tool_call>{"name": "b", "arguments": {}}'
        "</tool_call>\nAnything else?\n",
        "\nAnything else?\n",
        [("a", "{}"), ("b", "{}")],
    ),
    ("a lone tag at the end", "Hmm <tool_call>", "Hmm <tool_call>", []),
]

LLAMA3_UNUSUAL = [
    ("JSON that is not a call", '{"answer": 42, "unit": "apples"}', '{"answer": 42, "unit": "apples"}', []),
    (
        "python_tag with built-in tool code",
        '<|python_tag|>brave_search.call(query="weather in Oslo")',
        '<|python_tag|>brave_search.call(query="weather in Oslo")',
        [],
    ),
    (
        "text before the JSON: not a call, as in Meta's format",
        'Sure! {"name": "get_time", "parameters": {}}',
        'Sure! {"name": "get_time", "parameters": {}}',
        [],
    ),
    (
        "text after the calls",
        '{"name": "get_time", "parameters": {}}\n\nLet me know if you need more.',
        "\n\nLet me know if you need more.",
        [("get_time", "{}")],
    ),
    ("starts like JSON, is not", "{Note} this is not JSON", "{Note} this is not JSON", []),
    (
        "other keys are ignored, numbers too",
        '{"id": 12345, "name": "get_time", "parameters": {"tz": "UTC"}, "score": -0.75}',
        None,
        [("get_time", '{"tz": "UTC"}')],
    ),
    (
        "cut off",
        '{"name": "get_weather", "parameters": {"city": "Os',
        None,
        [("get_weather", '{"city": "Os')],
    ),
]

MISTRAL_UNUSUAL = [
    ("junk after the marker", "[TOOL_CALLS] not a call at all", "[TOOL_CALLS] not a call at all", []),
    ("name that is not a name", "[TOOL_CALLS]get weather[ARGS]{}", "[TOOL_CALLS]get weather[ARGS]{}", []),
    (
        "v11 name{args} without [ARGS], text after",
        '[TOOL_CALLS]get_time{"tz": "UTC"} Done.',
        " Done.",
        [("get_time", '{"tz": "UTC"}')],
    ),
    (
        "a single object instead of an array",
        '[TOOL_CALLS] {"name": "get_time", "arguments": {"tz": "UTC"}}',
        None,
        [("get_time", '{"tz": "UTC"}')],
    ),
    (
        "array item that is not a call, after a call",
        '[TOOL_CALLS][{"name": "a", "arguments": {}}, 42]',
        ", 42]",
        [("a", "{}")],
    ),
    ("marker alone", "Ok [TOOL_CALLS]", "Ok [TOOL_CALLS]", []),
    ("v11 arguments that are not JSON", "[TOOL_CALLS]get_time{oops} rest", "[TOOL_CALLS]get_time{oops} rest", []),
    ("empty array", "[TOOL_CALLS] []", "[TOOL_CALLS] []", []),
    (
        "not a call, then a call",
        '[TOOL_CALLS]not a name [TOOL_CALLS]get_time[ARGS]{}',
        "[TOOL_CALLS]not a name ",
        [("get_time", "{}")],
    ),
]

PYTHONIC_UNUSUAL = [
    ("positional argument", '[get_weather("Oslo")]', '[get_weather("Oslo")]', []),
    ("markdown link", "[Oslo](https://en.wikipedia.org/wiki/Oslo) is the capital.",
     "[Oslo](https://en.wikipedia.org/wiki/Oslo) is the capital.", []),
    ("empty list", "[]", "[]", []),
    ("list that never closes", '[get_weather(city="Oslo"', '[get_weather(city="Oslo"', []),
    (
        "a good call, then an expression",
        "[a(x=1), b(y=z + 1)]",
        ", b(y=z + 1)]",
        [("a", '{"x": 1}')],
    ),
    (
        "llama 4 wrapper, dotted name, JSON spellings",
        '<|python_start|>[tools.get_time(tz="UTC", dst=true, at=null)]<|python_end|>',
        None,
        [("tools.get_time", '{"tz": "UTC", "dst": true, "at": null}')],
    ),
    ("text after the list", '[get_time()]\nHope that helps.', "\nHope that helps.", [("get_time", "{}")]),
]

QWEN3_CODER_UNUSUAL = [
    (
        "not a function after <tool_call>: released as content, tags included",
        "<tool_call>\nnot xml\n</tool_call> done",
        "<tool_call>\nnot xml\n</tool_call> done",
        [],
    ),
    (
        "hermes JSON inside the tags: content",
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
        [],
    ),
    (
        "cut off inside a value: the value as far as it got, the call closed",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOs",
        None,
        [("get_weather", '{"city": "Os"}')],
    ),
    (
        "cut off after the name: not a call yet",
        "<tool_call>\n<function=get_weather>\n",
        "<tool_call>\n<function=get_weather>\n",
        [],
    ),
    (
        "<function= without <tool_call>, text after",
        "<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\nDone.",
        "\nDone.",
        [("get_weather", '{"city": "Oslo"}')],
    ),
    ("prose that mentions <function=...>", "Use <function=name> syntax.", "Use <function=name> syntax.", []),
    (
        "forgotten </parameter>s: values end at the next tag",
        "<tool_call>\n<function=f>\n<parameter=a>\nx\n<parameter=b>\ny\n</function>\n</tool_call>",
        None,
        [("f", '{"a": "x", "b": "y"}')],
    ),
    (
        "only one newline is trimmed each side; inline values; text between parameters ignored",
        "<tool_call><function=f><parameter=a>\n\n x \n\n</parameter> junk <parameter=b>y</parameter>"
        "</function></tool_call>",
        None,
        [("f", '{"a": "\\n x \\n", "b": "y"}')],
    ),
    (
        "two functions in one block, forgotten </tool_call>, text after",
        "<tool_call>\n<function=a>\n</function>\n<function=b>\n<parameter=x>\n1\n</parameter>\n</function>\nOk.",
        "\nOk.",
        [("a", "{}"), ("b", '{"x": "1"}')],
    ),
    (
        "tags inside a value are text, except the ones that end it",
        "<tool_call>\n<function=f>\n<parameter=html>\n<b>a</b> <tool_call> <function=g>\n</parameter>\n"
        "</function>\n</tool_call>",
        None,
        [("f", '{"html": "<b>a</b> <tool_call> <function=g>"}')],
    ),
    (
        "a repeated parameter appears twice",
        "<tool_call><function=f><parameter=a>1</parameter><parameter=a>2</parameter></function></tool_call>",
        None,
        [("f", '{"a": "1", "a": "2"}')],
    ),
    ("a lone tag at the end", "Hmm <tool_call>", "Hmm <tool_call>", []),
]

_V3 = "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
DEEPSEEK_V3_UNUSUAL = [
    (
        "indented JSON arguments",
        f'<｜tool▁calls▁begin｜>{_V3}get_weather\n```json\n{{\n  "city": "Oslo"\n}}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        None,
        [("get_weather", '{\n  "city": "Oslo"\n}')],
    ),
    (
        "arguments that are not JSON: content",
        f"<｜tool▁calls▁begin｜>{_V3}get_weather\n```json\nnot json\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        f"<｜tool▁calls▁begin｜>{_V3}get_weather\n```json\nnot json\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        [],
    ),
    (
        "cut off",
        f'<｜tool▁calls▁begin｜>{_V3}get_weather\n```json\n{{"city": "Os',
        None,
        [("get_weather", '{"city": "Os')],
    ),
    (
        "no fence, forgotten call end, text after the section",
        f'<｜tool▁calls▁begin｜>{_V3}a {{"x": 1}}{_V3}b\n{{}}<｜tool▁calls▁end｜>\nDone.',
        "\nDone.",
        [("a", '{"x": 1}'), ("b", "{}")],
    ),
    ("junk in the section", "<｜tool▁calls▁begin｜>junk<｜tool▁calls▁end｜> ok", "<｜tool▁calls▁begin｜>junk<｜tool▁calls▁end｜> ok", []),
    (
        "a good call, then a bad one",
        f"<｜tool▁calls▁begin｜>{_V3}a\n{{}}<｜tool▁call▁end｜><｜tool▁call▁begin｜>bad<｜tool▁sep｜>x<｜tool▁call▁end｜>",
        "<｜tool▁call▁begin｜>bad<｜tool▁sep｜>x<｜tool▁call▁end｜>",
        [("a", "{}")],
    ),
    ("a lone marker", "Hmm <｜tool▁calls▁begin｜>", "Hmm <｜tool▁calls▁begin｜>", []),
]

DEEPSEEK_V31_UNUSUAL = [
    (
        "empty arguments are {}",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜><｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        None,
        [("get_time", "{}")],
    ),
    (
        "a name that is not a name",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get time<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        [],
    ),
    (
        "cut off",
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Os',
        None,
        [("get_weather", '{"city": "Os')],
    ),
    (
        "section end left out",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜>\n",
        None,
        [("get_time", "{}")],
    ),
]

_KIMI = "<|tool_calls_section_begin|><|tool_call_begin|>"
KIMI_K2_UNUSUAL = [
    (
        "a head without :index still names a call",
        f'{_KIMI}functions.get_weather<|tool_call_argument_begin|>{{"city": "Oslo"}}<|tool_call_end|><|tool_calls_section_end|>',
        None,
        [("get_weather", '{"city": "Oslo"}')],
    ),
    (
        "arguments that are not JSON: content",
        f"{_KIMI}functions.f:0<|tool_call_argument_begin|>not json<|tool_call_end|><|tool_calls_section_end|>",
        f"{_KIMI}functions.f:0<|tool_call_argument_begin|>not json<|tool_call_end|><|tool_calls_section_end|>",
        [],
    ),
    (
        "empty arguments are {}",
        f"{_KIMI}functions.f:0<|tool_call_argument_begin|> <|tool_call_end|><|tool_calls_section_end|>",
        None,
        [("f", "{}")],
    ),
    (
        "cut off",
        f'{_KIMI}functions.get_weather:0<|tool_call_argument_begin|>{{"city": "Os',
        None,
        [("get_weather", '{"city": "Os')],
    ),
    (
        "text after the section is content",
        f"{_KIMI}functions.f:0<|tool_call_argument_begin|>{{}}<|tool_call_end|><|tool_calls_section_end|>\nDone.",
        "\nDone.",
        [("f", "{}")],
    ),
    (
        "call end left out before the section end",
        f'{_KIMI}functions.f:0<|tool_call_argument_begin|>{{"a": 1}}<|tool_calls_section_end|>',
        None,
        [("f", '{"a": 1}')],
    ),
    ("an empty section", "<|tool_calls_section_begin|><|tool_calls_section_end|>",
     "<|tool_calls_section_begin|><|tool_calls_section_end|>", []),
    (
        "a call marker outside a section is text",
        "Hi <|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
        "Hi <|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
        [],
    ),
]

GRANITE_UNUSUAL = [
    ("not JSON after the marker", "<|tool_call|>not json", "<|tool_call|>not json", []),
    (
        "a single object instead of an array",
        '<|tool_call|>{"name": "f", "arguments": {"a": 1}}',
        None,
        [("f", '{"a": 1}')],
    ),
    ("missing arguments are {}", '<tool_call>[{"name": "f"}]', None, [("f", "{}")]),
    ("an empty array", "<|tool_call|>[]", "<|tool_call|>[]", []),
    (
        "cut off",
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Os',
        None,
        [("get_weather", '{"city": "Os')],
    ),
    (
        "two marked arrays, text after",
        '<|tool_call|>[{"name": "a", "arguments": {}}] <|tool_call|>[{"name": "b", "arguments": {}}]\nDone.',
        "\nDone.",
        [("a", "{}"), ("b", "{}")],
    ),
]

UNUSUAL = (
    [("hermes", *case) for case in HERMES_UNUSUAL]
    + [("llama3_json", *case) for case in LLAMA3_UNUSUAL]
    + [("mistral", *case) for case in MISTRAL_UNUSUAL]
    + [("pythonic", *case) for case in PYTHONIC_UNUSUAL]
    + [("qwen3_coder", *case) for case in QWEN3_CODER_UNUSUAL]
    + [("deepseek_v3", *case) for case in DEEPSEEK_V3_UNUSUAL]
    + [("deepseek_v31", *case) for case in DEEPSEEK_V31_UNUSUAL]
    + [("kimi_k2", *case) for case in KIMI_K2_UNUSUAL]
    + [("granite", *case) for case in GRANITE_UNUSUAL]
    + [("llama4_pythonic", *case) for case in PYTHONIC_UNUSUAL]
)


@pytest.mark.parametrize(
    "parser_name, description, text, content, calls", UNUSUAL, ids=[f"{case[0]}: {case[1]}" for case in UNUSUAL]
)
def test_unusual_output_is_never_lost(parser_name, description, text, content, calls):
    assert_every_splitting_gives(parser_name, text, content, calls)


def test_kimi_ids_are_the_models_own():
    text = (
        f"{_KIMI}functions.get_weather:3<|tool_call_argument_begin|>{{}}<|tool_call_end|>"
        "<|tool_call_begin|>get_time<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"
    )
    for pieces in splittings(text, count=4):
        streamed = stream_tool_parser(get_tool_parser("kimi_k2")(), pieces)
        assert [(call.id, call.name) for call in streamed.calls] == [
            ("functions.get_weather:3", "get_weather"),
            ("functions.get_time:1", "get_time"),
        ]


def test_qwen3_coder_string_values_stream_and_others_are_sent_whole():
    pieces = [
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOs", "lo\n", "</parameter>\n<parameter=days>\n1",
        "2\n</parameter>\n</function>\n</tool_call>",
    ]  # fmt: skip
    parser = get_tool_parser("qwen3_coder")(WEATHER_TOOLS)
    sent = [[piece.arguments for piece in parser.feed(piece).tool_calls] for piece in pieces] + [
        [piece.arguments for piece in parser.finish().tool_calls]
    ]
    assert sent == [['{"city": "Os'], ["lo"], ['", "days": '], ["12}"], []]


QWEN3_CONVERSIONS = [
    # (schema of the parameter, value text, converted)
    ({"type": "string"}, "007", "007"),
    ({"type": "integer"}, "42", 42),
    ({"type": "integer"}, "forty-two", "forty-two"),
    ({"type": "number"}, "2.50", 2.5),
    ({"type": "number"}, "2.0", 2),
    ({"type": "number"}, "inf", "inf"),
    ({"type": "boolean"}, "True", True),
    ({"type": "boolean"}, "0", False),
    ({"type": "boolean"}, "yes", "yes"),
    ({"type": "object"}, '{"a": [1, null]}', {"a": [1, None]}),
    ({"type": "array"}, "['x']", "['x']"),  # not JSON: kept as written
    ({"type": ["integer", "null"]}, "null", None),
    ({"type": ["string", "integer"]}, "5", 5),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, "x", "x"),
    ({"enum": [1, 2, 3]}, "2", 2),
    ({"type": "int"}, "7", 7),
    ({"type": "date"}, "[1]", [1]),  # no known type: JSON if it is JSON
    ({}, "42", "42"),
]


@pytest.mark.parametrize("schema, text, value", QWEN3_CONVERSIONS, ids=[repr(case[:2]) for case in QWEN3_CONVERSIONS])
def test_qwen3_coder_values_are_converted_by_schema(schema, text, value):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"p": schema}}}}]
    call = f"<tool_call>\n<function=f>\n<parameter=p>\n{text}\n</parameter>\n</function>\n</tool_call>"
    arguments = json.dumps({"p": value}, ensure_ascii=False)
    assert_every_splitting_gives("qwen3_coder", call, None, [("f", arguments)], tools)


def test_default_ids_are_call_and_24_alphanumerics_and_unique():
    _, calls = whole_tools(get_tool_parser("hermes")(), 
        '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", call.id) for call in calls)
    assert calls[0].id != calls[1].id


def test_mistral_ids_are_9_alphanumerics():
    _, calls = whole_tools(get_tool_parser("mistral")(), "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{}")
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", call.id) for call in calls)
    assert calls[0].id != calls[1].id


def test_make_id_is_used():
    ids = iter(["first", "second"])
    parser = get_tool_parser("llama3_json")(make_id=lambda: next(ids))
    delta = parser.feed('{"name": "a", "parameters": {}}; {"name": "b", "parameters": {}}')
    assert [piece.id for piece in delta.tool_calls] == ["first", "second"]


def test_registry():
    assert set(PARSER_NAMES) <= set(TOOL_PARSERS)
    with pytest.raises(ValueError, match="unknown tool-call parser 'nope'.*hermes.*pythonic"):
        get_tool_parser("nope")


def test_feed_after_finish_is_an_error_and_finish_is_idempotent():
    parser = get_tool_parser("hermes")()
    parser.feed("hi <tool")
    assert parser.finish().content == "<tool"
    assert not parser.finish()
    with pytest.raises(RuntimeError):
        parser.feed("more")


# Fuzz: generated outputs (fixed seeds) in every format, intact and damaged.

FUZZ_CASES = 60
FUZZ_SPLITTINGS = 6


@pytest.mark.parametrize("parser_name", PARSER_NAMES)
def test_generated_outputs_round_trip(parser_name: str):
    rng = random.Random(parser_name)
    parser_class = get_tool_parser(parser_name)
    for case in range(FUZZ_CASES):
        text, content, calls = random_tool_output(rng, parser_name)
        for pieces in splittings(text, count=FUZZ_SPLITTINGS, seed=case):
            streamed = stream_tool_parser(parser_class(), pieces)
            assert (streamed.content or None) == content, (text, split_description(pieces))
            assert json_call_summary(streamed.calls) == calls, (text, split_description(pieces))
        for call in streamed.calls:
            if parser_name in CONVERTED_ARGUMENTS:
                assert call.arguments == json.dumps(json.loads(call.arguments), ensure_ascii=False)
            else:
                assert call.arguments in text, "the arguments are the model's own text"


@pytest.mark.parametrize("parser_name", PARSER_NAMES)
def test_damaged_outputs_give_the_same_result_in_every_splitting(parser_name: str):
    rng = random.Random("damaged " + parser_name)
    parser_class = get_tool_parser(parser_name)
    for case in range(FUZZ_CASES):
        text = mutate(rng, random_tool_output(rng, parser_name)[0])
        content, calls = whole_tools(parser_class(), text)
        if not calls:
            assert content == (text or None), "text that holds no call must come back whole as content"
        for pieces in splittings(text, count=FUZZ_SPLITTINGS, seed=case):
            streamed = stream_tool_parser(parser_class(), pieces)
            assert (streamed.content or None, call_summary(streamed.calls)) == (content, call_summary(calls)), (
                text,
                split_description(pieces),
            )
