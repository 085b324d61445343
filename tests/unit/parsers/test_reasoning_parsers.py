"""Reasoning parsers: realistic outputs fed whole, char by char and in random splittings."""

from __future__ import annotations

import random

import pytest

from tritonchat.parsers import REASONING_PARSERS, get_reasoning_parser, get_tool_parser

from .samples import call_summary, split_description, splittings, stream_tool_parser, whole_reasoning

QWEN3_THINKING = (
    "<think>\nThe user wants the weather in Oslo. I should call get_weather with city=Oslo.\n</think>\n\n"
    "Let me check the weather in Oslo."
)
R1_FROM_PROMPT = (  # the DeepSeek-R1 template already wrote "<think>\n" into the prompt
    "Okay, so the user is asking what 2 + 2 is. That's 4.\nLet me double-check: 2 + 2 = 4.\n</think>\n\n"
    "**Answer:** 2 + 2 = **4**"
)

# (parser, starts_in_reasoning, description, text, reasoning, content)
CASES = [
    ("qwen3", False, "thinking", QWEN3_THINKING,
     "\nThe user wants the weather in Oslo. I should call get_weather with city=Oslo.\n",
     "\n\nLet me check the weather in Oslo."),
    ("qwen3", False, "no think block: all content", "Hello! How can I help you today?", None,
     "Hello! How can I help you today?"),
    ("qwen3", False, "empty think block", "<think>\n\n</think>\n\nHi there.", "\n\n", "\n\nHi there."),
    ("qwen3", False, "leading whitespace before <think>", "\n<think>ok</think>done", "ok", "done"),
    ("qwen3", False, "untagged text mentioning tags stays content", "Use </think> to end thinking.", None,
     "Use </think> to end thinking."),
    ("qwen3", False, "<thinking> is not <think>", "<thinking>aloud</thinking>", None, "<thinking>aloud</thinking>"),
    ("qwen3", True, "template opened <think>", "The user says hi.\n</think>\n\nHi!", "The user says hi.\n", "\n\nHi!"),
    ("qwen3", True, "template opened <think>, model repeats it", "<think>\nhm\n</think>\nHi!", "\nhm\n", "\nHi!"),
    ("qwen3", True, "cut off while reasoning", "Let me think about th", "Let me think about th", None),
    ("qwen3", True, "near-tags inside reasoning", "a </thinker> b </thi c</think>d", "a </thinker> b </thi c", "d"),
    ("deepseek_r1", False, "reply starts inside reasoning", R1_FROM_PROMPT,
     "Okay, so the user is asking what 2 + 2 is. That's 4.\nLet me double-check: 2 + 2 = 4.\n",
     "\n\n**Answer:** 2 + 2 = **4**"),
    ("deepseek_r1", True, "same with starts_in_reasoning", R1_FROM_PROMPT,
     "Okay, so the user is asking what 2 + 2 is. That's 4.\nLet me double-check: 2 + 2 = 4.\n",
     "\n\n**Answer:** 2 + 2 = **4**"),
    ("deepseek_r1", False, "explicit <think>", "<think>\nfine\n</think>\n\n4", "\nfine\n", "\n\n4"),
    ("deepseek_r1", False, "no end tag: all reasoning", "Just text, no tags.", "Just text, no tags.", None),
    ("deepseek_r1", False, "later tags are content", "x</think>y</think><think>z", "x", "y</think><think>z"),
    ("deepseek_r1", False, "unicode", "思考中… 🤔</think>答案是 4。", "思考中… 🤔", "答案是 4。"),
]


@pytest.mark.parametrize(
    "parser_name, starts_in_reasoning, description, text, reasoning, content",
    CASES,
    ids=[f"{case[0]}{' (starts in reasoning)' if case[1] else ''}: {case[2]}" for case in CASES],
)
def test_every_splitting_gives_the_same_result(parser_name, starts_in_reasoning, description, text, reasoning, content):
    parser_class = get_reasoning_parser(parser_name)
    assert whole_reasoning(parser_class(starts_in_reasoning), text) == (reasoning, content), "parse()"
    for pieces in splittings(text):
        parser = parser_class(starts_in_reasoning)
        deltas = [parser.feed(piece) for piece in pieces] + [parser.finish()]
        streamed = ("".join(d.reasoning for d in deltas) or None, "".join(d.content for d in deltas) or None)
        assert streamed == (reasoning, content), split_description(pieces)
        assert not any(delta.tool_calls for delta in deltas)


def test_tags_split_across_pieces_never_leak():
    parser = get_reasoning_parser("qwen3")()
    deltas = [parser.feed(piece) for piece in ["<thi", "nk>", "hmm </thi", "nk>", "ok"]] + [parser.finish()]
    assert [(delta.reasoning, delta.content) for delta in deltas] == [
        ("", ""), ("", ""), ("hmm ", ""), ("", ""), ("", "ok"), ("", ""),
    ]


def test_text_that_only_starts_like_a_tag_is_released_once_clear():
    parser = get_reasoning_parser("qwen3")(starts_in_reasoning=True)
    assert parser.feed("a </th").reasoning == "a "
    assert parser.feed("ought>").reasoning == "</thought>"
    parser = get_reasoning_parser("qwen3")()
    assert parser.feed("<th").content == ""
    assert parser.feed("e end").content == "<the end"


def test_reasoning_then_tool_calls_chained():
    """The caller feeds the reasoning parser's content to the tool parser."""
    text = (
        "<think>\nI need the weather. Maybe <tool_call> syntax.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    rng = random.Random(7)
    for pieces in splittings(text, seed=rng.randint(0, 99)):
        reasoning_parser, tool_parser = get_reasoning_parser("qwen3")(), get_tool_parser("hermes")()
        reasoning, content_pieces = "", []
        for piece in pieces:
            delta = reasoning_parser.feed(piece)
            reasoning += delta.reasoning
            content_pieces.append(delta.content)
        last = reasoning_parser.finish()
        reasoning += last.reasoning
        content_pieces.append(last.content)
        streamed = stream_tool_parser(tool_parser, content_pieces)
        assert reasoning == "\nI need the weather. Maybe <tool_call> syntax.\n", split_description(pieces)
        assert streamed.content == "\n\n"
        assert call_summary(streamed.calls) == [("get_weather", '{"city": "Oslo"}')]


def test_registry():
    assert {"deepseek_r1", "qwen3"} <= set(REASONING_PARSERS)
    with pytest.raises(ValueError, match="unknown reasoning parser 'nope'.*deepseek_r1.*qwen3"):
        get_reasoning_parser("nope")
