"""tool_choice planning and the parsers for constrained (named / required) tool calls."""

from __future__ import annotations

import json
import random

import pytest

from tests.unit.parsers.samples import whole_tools
from tritonchat.protocol import parse_chat_request
from tritonchat.tool_choice import (
    FirstCallOnly,
    NamedToolParser,
    RequiredToolParser,
    plan_tools,
    prompt_opens_reasoning,
    required_schema,
)

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time"}}


def request(**fields):
    return parse_chat_request(json.dumps({"messages": [{"role": "user", "content": "hi"}], **fields}))


def plan(req, parser="hermes", reasoning=""):
    return plan_tools(req, tool_call_parser=parser, reasoning_parser=reasoning, starts_in_reasoning=False)


def splits(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 8))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


def stream(parser, pieces):
    deltas = [parser.feed(p) for p in pieces] + [parser.finish()]
    return deltas


def test_no_tools_no_parsing():
    assert plan(request()).choice_text is None and plan(request()).structured is None
    assert plan(request(tools=[WEATHER], tool_choice="none")).choice_text is None


def test_auto_is_the_default_with_tools():
    p = plan(request(tools=[WEATHER]))
    assert p.structured is None and p.calls_finish_reason == "tool_calls"


def test_named_choice_constrains_to_the_parameters():
    p = plan(request(tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    assert p.structured == {"json": WEATHER["function"]["parameters"]}
    assert p.calls_finish_reason is None
    parsed = p.choice_text().parse('{"city": "Oslo"}')
    assert parsed.content is None and [(c.name, c.arguments) for c in parsed.tool_calls] == [("get_weather", '{"city": "Oslo"}')]
    p = plan(request(tools=[TIME], tool_choice={"type": "function", "function": {"name": "get_time"}}))
    assert p.structured == {"json": {"type": "object", "properties": {}}}


def test_required_choice_constrains_to_an_array_of_calls():
    p = plan(request(tools=[WEATHER, TIME], tool_choice="required"))
    schema = p.structured["json"]
    assert schema["minItems"] == 1 and "maxItems" not in schema
    assert [option["properties"]["name"]["enum"] for option in schema["items"]["anyOf"]] == [["get_weather"], ["get_time"]]
    one = plan(request(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False))
    assert one.structured["json"]["maxItems"] == 1


REQUIRED_OUTPUT = '[{"name": "get_weather", "parameters": {"city": "Oslo, \\"Norway\\""}}, {"name": "get_time", "parameters": {}}]'


@pytest.mark.parametrize("seed", range(25))
def test_required_parser_is_chunking_invariant(seed):
    pieces = list(REQUIRED_OUTPUT) if seed == 0 else splits(REQUIRED_OUTPUT, seed)
    parser = RequiredToolParser()
    deltas = stream(parser, pieces)
    calls = {}
    for delta in deltas:
        assert delta.content == ""
        for piece in delta.tool_calls:
            if piece.id is not None:
                assert piece.index == len(calls) and piece.name
                calls[piece.index] = [piece.name, ""]
            calls[piece.index][1] += piece.arguments
    assert [(name, json.loads(args)) for name, args in calls.values()] == [
        ("get_weather", {"city": 'Oslo, "Norway"'}), ("get_time", {})]
    _, whole = whole_tools(RequiredToolParser(), REQUIRED_OUTPUT)
    assert [(c.name, c.arguments) for c in whole] == [tuple(v) for v in calls.values()]
    assert len({c.id for c in whole}) == 2


def test_named_parser_streams_the_output_as_arguments():
    parser = NamedToolParser("get_weather")
    deltas = stream(parser, ['{"ci', 'ty": "Os', 'lo"}'])
    first = deltas[0].tool_calls[0]
    assert (first.index, first.name, first.arguments) == (0, "get_weather", '{"ci')
    assert first.id and first.id.startswith("call_")
    assert "".join(p.arguments for d in deltas for p in d.tool_calls) == '{"city": "Oslo"}'
    assert all(p.id is None for d in deltas[1:] for p in d.tool_calls)


def test_first_call_only():
    from tritonchat.parsers.base import get_tool_parser

    text = '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>'
    parser = FirstCallOnly(get_tool_parser("hermes")())
    deltas = stream(parser, splits(text, 3))
    assert {p.index for d in deltas for p in d.tool_calls} == {0}
    assert [c.name for c in parser.calls] == ["a"]


def test_prompt_opens_reasoning():
    assert prompt_opens_reasoning("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n")


def test_required_schema_without_parameters():
    schema = required_schema({"f": {"name": "f"}}, one_call=False)
    assert schema["items"]["anyOf"][0]["properties"]["parameters"] == {"type": "object", "properties": {}}


def test_mistral_keeps_special_tokens_in_the_text():
    assert plan(request(tools=[WEATHER]), parser="mistral").sampling == {"skip_special_tokens": False}
    assert plan(request(tools=[WEATHER]), parser="hermes").sampling is None


HARMONY_CALL = (
    "<|channel|>analysis<|message|>Needs the weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Oslo"}<|call|>'
)


def test_harmony_parsers_read_reasoning_and_calls_together(harmony_vocab):
    """gpt-oss: with both of vLLM's parsers configured, the tool parser reads the channels
    itself (analysis as reasoning, calls to functions.*), streamed as whole; the engine keeps
    the channel markers."""
    tool_plan = plan(request(tools=[WEATHER]), parser="openai", reasoning="openai_gptoss")
    assert tool_plan.sampling == {"skip_special_tokens": False}
    whole = tool_plan.choice_text().parse(HARMONY_CALL)
    assert whole.reasoning == "Needs the weather."
    assert [(c.name, c.arguments) for c in whole.tool_calls] == [("get_weather", '{"city": "Oslo"}')]
    assert whole.content is None
    for seed in range(5):
        choice = tool_plan.choice_text()
        deltas = stream(choice, splits(HARMONY_CALL, seed))
        assert "".join(d.reasoning for d in deltas) == "Needs the weather."
        assert "".join(c.arguments for d in deltas for c in d.tool_calls) == '{"city": "Oslo"}'


def test_harmony_reasoning_alone_without_tools(harmony_vocab):
    final = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Sunny.<|return|>"
    tool_plan = plan(request(), parser="openai", reasoning="openai_gptoss")
    assert tool_plan.sampling == {"skip_special_tokens": False}
    whole = tool_plan.choice_text().parse(final)
    assert (whole.reasoning, whole.content, whole.tool_calls) == ("Think.", "Sunny.", [])
