"""Differential tests: our parsers against vLLM's own on the same texts.

Whole texts go through vLLM's `extract_tool_calls` / `extract_reasoning`; streams go
through `extract_tool_calls_streaming` / `extract_reasoning_streaming` in token-aligned
pieces (vLLM's streaming parsers look at token ids), and ours get the very same pieces.
Compared: the calls (names, arguments parsed as JSON; the exact text may differ, as vLLM
re-serialises with json.dumps where we keep the model's text) and the content.

Where vLLM behaves in a way we consider wrong, the case is listed in VLLM_DIFFERENCES with
the reason, and only our behaviour (the expected result in samples.py) is asserted.
Other deliberate differences, on inputs outside this corpus, are in DELIBERATE_DIFFERENCES
at the bottom.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from tritonchat.parsers import get_reasoning_parser, get_tool_parser  # noqa: E402

from .samples import (  # noqa: E402
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
    Sample,
    json_call_summary,
    whole_reasoning,
    whole_tools,
)

TOKEN_SPLITTINGS = 6
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]

# (our parser, sample name, "whole" | "stream") -> why vLLM's result differs from ours.
VLLM_DIFFERENCES = {
    ("hermes", "hermes 2 pro, arguments before name", "stream"):
        'vLLM streams everything after "arguments": as the arguments, so they end in '
        '`, "name": "get_stock_fundamentals"` (invalid JSON); its non-streaming path is right.',
    ("llama3_json", "several calls separated by ;", "stream"):
        "vLLM never streams `{}` for a call whose arguments are empty (`if cur_arguments:`), "
        'so the second call\'s arguments are "" (not JSON).',
    ("pythonic", "multi-line list", "whole"):
        "vLLM's non-streaming regex wants a call right after `[`, so a list laid out over several "
        "lines is returned as content; its streaming path does parse it. We parse it both ways.",
    ("deepseek_v3", "r1 text before, parallel calls", "stream"):
        "vLLM's streaming passes the newline between two calls through as content; we drop whitespace "
        "between calls (as its non-streaming path does).",
    ("deepseek_v31", "text before, parallel calls", "stream"):
        "vLLM's streaming drops the argument text that arrives in the same chunk as <｜tool▁call▁end｜>, "
        "so with chunks of several tokens the arguments are cut short (not JSON).",
    ("deepseek_v31", "unicode and nested arguments", "stream"):
        "As above: arguments cut short when the call's last text and <｜tool▁call▁end｜> share a chunk.",
    ("deepseek_v31", "empty arguments", "stream"):
        'As above: "{}" arrives with <｜tool▁call▁end｜> and the arguments come out as "" or "{".',
}

# Parsers whose vLLM counterpart strips the whitespace around the content in its non-streaming
# path when it found calls (its streaming path keeps it, as we do both ways); the whole-text
# comparison compares the stripped content for these.
VLLM_STRIPS_CONTENT = {"qwen3_coder", "granite"}


@pytest.fixture(scope="module", autouse=True)
def quiet_vllm():
    """vLLM logs a traceback for every text its parsers reject."""
    logger = logging.getLogger("vllm")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def load_tokenizer(tiny_model: Path, extra_tokens: list[str]):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model))
    # vLLM's llama3_json and mistral parsers insist on finding their markers in the vocabulary.
    tokenizer.add_tokens(extra_tokens)
    return tokenizer


@pytest.fixture(scope="module")
def marker_tokenizer(tiny_model):
    return load_tokenizer(tiny_model, ["<|python_tag|>", "[TOOL_CALLS]"])


@pytest.fixture(scope="module")
def tokenizer_v11(tiny_model):
    """With [ARGS] in the vocabulary vLLM's mistral parser reads the v11 `[TOOL_CALLS]name[ARGS]{...}` format."""
    return load_tokenizer(tiny_model, ["<|python_tag|>", "[TOOL_CALLS]", "[ARGS]"])


# The markers of the newer formats, as the tokens they are in their models' vocabularies.
NEW_MARKERS = [
    "<tool_call>", "</tool_call>",  # Qwen3-Coder
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_end|>",
    "<|tool_call_argument_begin|>",  # Kimi K2
    "<|tool_call|>",  # Granite 3.0
    "<|python_start|>", "<|python_end|>",  # Llama 4
]  # fmt: skip


@pytest.fixture(scope="module")
def new_marker_tokenizer(tiny_model):
    return load_tokenizer(tiny_model, NEW_MARKERS)


def chat_request(tools: list[dict]):
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest(
        model="tiny", messages=[{"role": "user", "content": "Weather?"}], tools=tools, tool_choice="auto"
    )


@pytest.fixture(scope="module")
def request_with_tools():
    return chat_request(TOOLS)


def token_aligned_pieces(tokenizer, text: str, seed: int | None) -> tuple[list[int], list[int]]:
    """Token ids of the text and chunk boundaries: one token at a time (seed None) or 1-4 tokens.
    Only boundaries where the decoded prefix is a prefix of the text (no half characters)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text
    clean = [end for end in range(1, len(ids) + 1) if text.startswith(tokenizer.decode(ids[:end]))]
    rng = random.Random(seed)
    bounds = [0]
    while bounds[-1] < len(ids):
        ahead = [end for end in clean if end > bounds[-1]]
        bounds.append(ahead[0] if seed is None else ahead[min(len(ahead) - 1, rng.randint(0, 3))])
    return ids, bounds


def vllm_tool_stream(parser, tokenizer, text: str, seed: int | None, request) -> tuple[list[str], str, list]:
    """Stream through vLLM's parser as its serving layer does. Returns (text pieces, content, calls)."""
    ids, bounds = token_aligned_pieces(tokenizer, text, seed)
    pieces, content, calls, last = [], "", {}, None

    def take(message):
        nonlocal content
        content += message.content or ""
        for piece in message.tool_calls or []:
            call = calls.setdefault(piece.index, {"name": None, "arguments": ""})
            function = piece.function
            if function is not None and function.name:
                call["name"] = function.name
            if function is not None and function.arguments:
                call["arguments"] += function.arguments

    previous_text, previous_ids = "", []
    for start, end in zip(bounds, bounds[1:]):
        current_ids = ids[:end]
        current_text = tokenizer.decode(current_ids)
        delta_text = current_text[len(previous_text) :]
        pieces.append(delta_text)
        last = parser.extract_tool_calls_streaming(
            previous_text, current_text, delta_text, previous_ids, current_ids, ids[start:end], request
        )
        if last is not None:
            take(last)
        previous_text, previous_ids = current_text, current_ids
    if hasattr(parser, "finish_streaming"):
        final = parser.finish_streaming()
        if final is not None:
            take(final)
    # vLLM's serving layer appends arguments it parsed but did not stream to the last delta.
    if last is not None and last.tool_calls and calls:
        calls[max(calls)]["arguments"] += parser.get_remaining_unstreamed_args()
    summary = [(call["name"], json.loads(call["arguments"])) for _, call in sorted(calls.items())]
    return pieces, content, summary


def our_tool_stream(parser_name: str, pieces: list[str], tools: list[dict] | None = None) -> tuple[str, list]:
    parser = get_tool_parser(parser_name)(tools)
    deltas = [parser.feed(piece) for piece in pieces] + [parser.finish()]
    return "".join(delta.content for delta in deltas), json_call_summary(parser.calls)


def expected(sample: Sample) -> tuple[str | None, list]:
    return sample.content, [(name, json.loads(arguments)) for name, arguments in sample.calls]


TOOL_CASES = (
    [("hermes", "hermes", "marker_tokenizer", sample) for sample in HERMES_SAMPLES]
    + [("llama3_json", "llama3_json", "marker_tokenizer", sample) for sample in LLAMA3_SAMPLES]
    + [("mistral", "mistral", "marker_tokenizer", sample) for sample in MISTRAL_SAMPLES]
    + [("mistral", "mistral", "tokenizer_v11", sample) for sample in MISTRAL_V11_SAMPLES]
    + [("pythonic", "pythonic", "marker_tokenizer", sample) for sample in PYTHONIC_SAMPLES]
    + [("qwen3_coder", "qwen3_coder", "new_marker_tokenizer", sample) for sample in QWEN3_CODER_SAMPLES]
    + [("deepseek_v3", "deepseek_v3", "new_marker_tokenizer", sample) for sample in DEEPSEEK_V3_SAMPLES]
    + [("deepseek_v31", "deepseek_v31", "new_marker_tokenizer", sample) for sample in DEEPSEEK_V31_SAMPLES]
    + [("kimi_k2", "kimi_k2", "new_marker_tokenizer", sample) for sample in KIMI_K2_SAMPLES]
    + [("granite", "granite", "new_marker_tokenizer", sample) for sample in GRANITE_SAMPLES]
    + [("llama4_pythonic", "llama4_pythonic", "new_marker_tokenizer", sample) for sample in LLAMA4_PYTHONIC_SAMPLES]
)
TOOL_CASE_IDS = [f"{case[0]}: {case[3]}" for case in TOOL_CASES]


def vllm_tool_parser(vllm_name: str, tokenizer):
    from vllm.tool_parsers import ToolParserManager

    return ToolParserManager.get_tool_parser(vllm_name)(tokenizer)


@pytest.mark.parametrize("ours, theirs, tokenizer_fixture, sample", TOOL_CASES, ids=TOOL_CASE_IDS)
def test_whole_text_matches_vllm(ours, theirs, tokenizer_fixture, sample, request, request_with_tools):
    tokenizer = request.getfixturevalue(tokenizer_fixture)
    content, calls = whole_tools(get_tool_parser(ours)(sample.tools), sample.text)
    assert (content, json_call_summary(calls)) == expected(sample)

    if (ours, sample.name, "whole") in VLLM_DIFFERENCES:
        return
    vllm_request = chat_request(sample.tools) if sample.tools else request_with_tools
    result = vllm_tool_parser(theirs, tokenizer).extract_tool_calls(sample.text, vllm_request)
    assert json_call_summary(calls) == json_call_summary(result.tool_calls)
    assert result.tools_called == bool(calls)
    if ours in VLLM_STRIPS_CONTENT and calls:
        assert ((content or "").strip() or None) == result.content
    else:
        assert content == result.content


@pytest.mark.parametrize("ours, theirs, tokenizer_fixture, sample", TOOL_CASES, ids=TOOL_CASE_IDS)
def test_stream_matches_vllm(ours, theirs, tokenizer_fixture, sample, request, request_with_tools):
    tokenizer = request.getfixturevalue(tokenizer_fixture)
    differs = (ours, sample.name, "stream") in VLLM_DIFFERENCES
    vllm_request = chat_request(sample.tools) if sample.tools else request_with_tools
    for seed in [None, *range(TOKEN_SPLITTINGS)]:
        parser = vllm_tool_parser(theirs, tokenizer)
        if differs:
            ids, bounds = token_aligned_pieces(tokenizer, sample.text, seed)
            prefixes = [tokenizer.decode(ids[:end]) for end in bounds]
            pieces = [after[len(before) :] for before, after in zip(prefixes, prefixes[1:])]
        else:
            pieces, their_content, their_calls = vllm_tool_stream(parser, tokenizer, sample.text, seed, vllm_request)
        our_content, our_calls = our_tool_stream(ours, pieces, sample.tools)
        assert ((our_content or None), our_calls) == expected(sample), pieces
        if not differs:
            assert our_calls == their_calls, pieces
            assert our_content == their_content, pieces


# Reasoning.

REASONING_TEXTS = [
    "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?",
    "Okay, 2 + 2.\nIt is 4.\n</think>\n\nThe answer is 4.",
    "Hello! No thinking here.",
    "<think>\nStill thinking when the token limit hit",
    "<think>\n\n</think>\n\nDirect answer.",
    "思考 🤔</think>答案",
]

# (our parser, starts_in_reasoning, vLLM parser, vLLM constructor kwargs)
REASONING_PAIRS = [
    ("deepseek_r1", False, "deepseek_r1", {}),
    # vLLM's qwen3 parser starts in reasoning unless the request disables thinking.
    ("qwen3", True, "qwen3", {}),
    ("qwen3", False, "qwen3", {"chat_template_kwargs": {"enable_thinking": False}}),
]


def reasoning_difference(ours: str, starts_in_reasoning: bool, text: str, mode: str) -> str | None:
    """Why vLLM's result differs from ours on this text, or None if it should not."""
    if ours == "qwen3" and not starts_in_reasoning and "think>" in text:
        # With enable_thinking=False vLLM leaves think tags in the content, inconsistently: non-streaming
        # keeps both tags, streaming drops every `</think>` but keeps `<think>`. We read a `<think>` block
        # that opens the reply as reasoning, and keep any other tag text as content, both ways.
        return "thinking disabled in vLLM"
    if ours == "deepseek_r1" and mode == "stream" and text.startswith("<think>"):
        # vLLM's deepseek_r1 streaming only strips `<think>` when it arrives as a delta of its own;
        # when it comes with more text, the tag leaks into the reasoning.
        return "vLLM leaks <think> into reasoning"
    return None


def vllm_reasoning_stream(parser, tokenizer, text: str, seed: int | None):
    ids, bounds = token_aligned_pieces(tokenizer, text, seed)
    pieces, reasoning, content = [], "", ""
    previous_text, previous_ids = "", []
    for start, end in zip(bounds, bounds[1:]):
        current_ids = ids[:end]
        current_text = tokenizer.decode(current_ids)
        pieces.append(current_text[len(previous_text) :])
        message = parser.extract_reasoning_streaming(
            previous_text, current_text, pieces[-1], previous_ids, current_ids, ids[start:end]
        )
        if message is not None:
            reasoning += message.reasoning or ""
            content += message.content or ""
        previous_text, previous_ids = current_text, current_ids
    if hasattr(parser, "finish_streaming"):
        message = parser.finish_streaming()
        if message is not None:
            reasoning += message.reasoning or ""
            content += message.content or ""
    return pieces, (reasoning or None, content or None)


REASONING_CASES = [(*pair, text) for pair in REASONING_PAIRS for text in REASONING_TEXTS]
REASONING_IDS = [f"{case[0]}{'/starts' if case[1] else ''}: {case[4][:24]!r}" for case in REASONING_CASES]


@pytest.mark.parametrize("ours, starts_in_reasoning, theirs, kwargs, text", REASONING_CASES, ids=REASONING_IDS)
def test_reasoning_matches_vllm(ours, starts_in_reasoning, theirs, kwargs, text, tokenizer, request_with_tools):
    from vllm.reasoning import ReasoningParserManager

    their_class = ReasoningParserManager.get_reasoning_parser(theirs)
    our_class = get_reasoning_parser(ours)
    our_whole = whole_reasoning(our_class(starts_in_reasoning), text)

    if reasoning_difference(ours, starts_in_reasoning, text, "whole") is None:
        their_reasoning, their_content = their_class(tokenizer, **kwargs).extract_reasoning(text, request_with_tools)
        # vLLM reports an empty reasoning or content as "" in some cases and None in others; we always say None.
        assert our_whole == (their_reasoning or None, their_content or None)

    for seed in [None, *range(TOKEN_SPLITTINGS)]:
        pieces, theirs_streamed = vllm_reasoning_stream(their_class(tokenizer, **kwargs), tokenizer, text, seed)
        parser = our_class(starts_in_reasoning)
        deltas = [parser.feed(piece) for piece in pieces] + [parser.finish()]
        ours_streamed = ("".join(d.reasoning for d in deltas) or None, "".join(d.content for d in deltas) or None)
        assert ours_streamed == our_whole, pieces
        if reasoning_difference(ours, starts_in_reasoning, text, "stream") is None:
            assert ours_streamed == theirs_streamed, pieces


# Deliberate differences on inputs outside the corpus above, checked on our side only:
# (parser, text, our (content, calls), what vLLM does).
DELIBERATE_DIFFERENCES = [
    (
        "hermes",
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>\nDone.',
        ("\nDone.", [("a", {})]),
        "vLLM keeps only the text before the first call as content; text after the calls is dropped.",
    ),
    (
        "hermes",
        '<tool_call>{"name": "get_time"}</tool_call>',
        (None, [("get_time", {})]),
        "vLLM fails the whole parse on a missing arguments key and returns the text as content.",
    ),
    (
        "hermes",
        "<tool_call>{'name': 'bad'}</tool_call><tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>",
        ("<tool_call>{'name': 'bad'}</tool_call>", [("a", {})]),
        "One malformed call makes vLLM return everything as content, the good calls included.",
    ),
    (
        "llama3_json",
        'Sure! {"name": "get_time", "parameters": {}}',
        ('Sure! {"name": "get_time", "parameters": {}}', []),
        "vLLM's non-streaming path finds JSON anywhere in the text (its streaming path does not); "
        "we follow Meta's format and the streaming path: a call must open the reply.",
    ),
    (
        "llama3_json",
        '{"name": "get_time", "parameters": {}}\nAnything else?',
        ("\nAnything else?", [("get_time", {})]),
        "vLLM drops text after the calls.",
    ),
    (
        "qwen3_coder",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOs",
        (None, [("get_weather", {"city": "Os"})]),
        "Cut off inside a value, vLLM's non-streaming path drops the value ({}); we keep it as far as it got.",
    ),
    (
        "qwen3_coder",
        "<tool_call>\nnot xml\n</tool_call> done",
        ("<tool_call>\nnot xml\n</tool_call> done", []),
        "vLLM drops a <tool_call> block that holds no function; we release it as content.",
    ),
    (
        "qwen3_coder",
        "Use <function=name> syntax.",
        ("Use <function=name> syntax.", []),
        "vLLM turns any <function=NAME> in the text into a call; we need a <parameter= or </function> after it.",
    ),
    (
        "qwen3_coder",
        "<tool_call>\n<function=f>\n<parameter=a>\nx\n<parameter=b>\ny\n</function>\n</tool_call>",
        (None, [("f", {"a": "x", "b": "y"})]),
        "vLLM drops a last value whose </parameter> is missing; we end it at </function>.",
    ),
    (
        "deepseek_v3",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\n  \"a\": 1\n}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        (None, [("f", {"a": 1})]),
        "vLLM's non-streaming regex does not cross lines, so a call with indented JSON is lost (no call, no content).",
    ),
    (
        "deepseek_v31",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>not json<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>not json<｜tool▁call▁end｜><｜tool▁calls▁end｜>", []),
        "vLLM sends arguments that are not JSON as they are (also deepseek_v3, kimi_k2); we release them as content.",
    ),
    (
        "deepseek_v31",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜><｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        (None, [("f", {})]),
        'vLLM sends empty arguments as "" (not JSON); we send {}.',
    ),
    (
        "kimi_k2",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|>",
        (None, [("f", {})]),
        "vLLM drops a call whose head lacks the :INDEX; we keep it (id functions.f:0).",
    ),
    (
        "kimi_k2",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|>\nDone.",
        ("\nDone.", [("f", {})]),
        "vLLM drops text after the section (deliberately, streamed and whole); we keep it, as for the other formats.",
    ),
    (
        "kimi_k2",
        "<|tool_calls_section_begin|>junk<|tool_calls_section_end|> ok",
        ("<|tool_calls_section_begin|>junk<|tool_calls_section_end|> ok", []),
        "vLLM drops a section without calls and what follows it (deepseek: keeps the junk, drops the markers); "
        "we release it all as content.",
    ),
    (
        "granite",
        "<|tool_call|>not json",
        ("<|tool_call|>not json", []),
        "vLLM drops the marker of what is not a call; we release it verbatim.",
    ),
    (
        "granite",
        '<|tool_call|>{"name": "f", "arguments": {}}',
        (None, [("f", {})]),
        "vLLM wants the array; we also take a single call object, as our mistral parser does.",
    ),
]


@pytest.mark.parametrize(
    "parser_name, text, ours, vllm_behaviour",
    DELIBERATE_DIFFERENCES,
    ids=[case[3][:60] for case in DELIBERATE_DIFFERENCES],
)
def test_deliberate_differences(parser_name, text, ours, vllm_behaviour):
    content, calls = whole_tools(get_tool_parser(parser_name)(), text)
    assert (content, json_call_summary(calls)) == ours
