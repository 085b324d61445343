"""Anthropic's message and stream events from generation outputs: the layout, every event a valid
`anthropic` SDK type, a stream reassembled by the SDK's own reader equal to the whole message
(however the text was split), stop sequences, stop reasons and usage."""

from __future__ import annotations

import json

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from tritonchat.anthropic.events import Blocks, MessageBuilder, StopSequences, partial_input
from tritonchat.choice_text import ChoiceText
from tritonchat.formats import GenerationOutput
from tritonchat.parsers.base import Delta, ToolCallDelta, get_reasoning_parser, get_tool_parser
from tritonchat.tool_choice import NamedToolParser

EVENT = TypeAdapter(RawMessageStreamEvent)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def parsers(reasoning: bool = True, tools: bool = True):
    def make() -> ChoiceText:
        return ChoiceText(get_reasoning_parser("qwen3")(False) if reasoning else None,
                          get_tool_parser("hermes")(TOOLS) if tools else None)
    return make


def named():
    return ChoiceText(None, NamedToolParser("get_weather"))


def make(**kwargs) -> MessageBuilder:
    return MessageBuilder(completion_id="msg_1", created=0, model="tiny", system_fingerprint="fp", prompt_tokens=5,
                          **kwargs)


def outputs(pieces: list[str], finish: str) -> list[GenerationOutput]:
    out = [GenerationOutput(text=piece, completion_tokens=1) for piece in pieces] or [GenerationOutput()]
    out[0].prompt_tokens = 7  # the engine's count wins over the builder's
    out[-1].finish_reason = finish
    return out


def stream(pieces: list[str], finish: str = "stop", **kwargs) -> list[str]:
    builder = make(**kwargs)
    events = [event for output in outputs(pieces, finish) for event in builder.stream_output(0, output)]
    return events + builder.stream_finish(0)


def whole(pieces: list[str], finish: str = "stop", **kwargs) -> dict:
    builder = make(**kwargs)
    for output in outputs(pieces, finish):
        builder.add_output(0, output)
    message = builder.completion()
    Message.model_validate_json(message)
    return json.loads(message)


def reassembled(events: list[str]) -> dict:
    """The message the `anthropic` SDK's stream reader builds from the events."""
    snapshot, buffers = None, {}
    for event in events:
        snapshot = accumulate_event(event=EVENT.validate_json(event), current_snapshot=snapshot, json_bufs=buffers)
    message = snapshot.to_dict()
    assert message.pop("stop_details") is None  # the reader copies message_delta's (absent: null)
    return message


def without_ids(message: dict) -> dict:
    for number, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            assert block["id"].startswith("toolu_") and len(block["id"]) == 30
            block["id"] = f"call-{number}"
    return message


def splittings(text: str) -> list[list[str]]:
    return [[text[i: i + size] for i in range(0, len(text), size)] for size in (1, 2, 3, 7, max(len(text), 1))]


def test_a_text_stream_in_anthropics_layout():
    events = stream(["Hel", "lo"])
    assert events == [
        '{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"tiny",'
        '"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":7,"output_tokens":1}}}',
        '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}',
        '{"type":"content_block_stop","index":0}',
        '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
        '"usage":{"input_tokens":7,"output_tokens":2}}',
        '{"type":"message_stop"}',
    ]
    assert whole(["Hel", "lo"]) == {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "tiny",
        "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": 2}}


CASES = {
    "text": ("Hello, world 🎉", "stop", {}),
    "thinking": ("<think>Let me see.</think>It is sunny.", "stop", {"choice_text": parsers()}),
    "tool use": ('<think>Need data.</think>Checking.<tool_call>\n{"name": "get_weather", "arguments": '
                 '{"city": "Oslo", "days": [1, 2]}}\n</tool_call>', "stop", {"choice_text": parsers()}),
    "two calls": ('<tool_call>{"name": "get_weather", "arguments": {"city": "A"}}</tool_call>\n<tool_call>'
                  '{"name": "get_weather", "arguments": {}}</tool_call>', "stop", {"choice_text": parsers(False)}),
    "call cut by max_tokens": ('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "days": [1, 2',
                               "length", {"choice_text": parsers(False)}),
    "named tool": ('{"city": "Oslo"}', "stop", {"choice_text": named}),
    "stop sequence": ("Hello END", "stop", {"stop_sequences": ("END",)}),
    "empty": ("", "stop", {}),
    "reasoning only": ("<think>Hm", "length", {"choice_text": parsers()}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_stream_reassembled_by_the_sdk_is_the_whole_message(case):
    text, finish, kwargs = CASES[case]
    expected = without_ids(whole([text] if text else [], finish, **kwargs))
    for pieces in splittings(text):
        events = stream(pieces, finish, **kwargs)
        assert events[0].startswith('{"type":"message_start"') and events[-1] == '{"type":"message_stop"}'
        got = without_ids(reassembled(events))
        expected["usage"]["output_tokens"] = len(pieces) or 0
        assert got == expected, pieces
    assert expected["content"], "content[0] always exists"


def test_blocks_and_stop_reasons_of_the_cases():
    kinds = {case: ([block["type"] for block in whole([text], finish, **kw)["content"]],
                    whole([text], finish, **kw)["stop_reason"]) for case, (text, finish, kw) in CASES.items()}
    assert kinds == {
        "text": (["text"], "end_turn"),
        "thinking": (["thinking", "text"], "end_turn"),
        "tool use": (["thinking", "text", "tool_use"], "tool_use"),
        "two calls": (["tool_use", "tool_use"], "tool_use"),
        "call cut by max_tokens": (["tool_use"], "max_tokens"),
        "named tool": (["tool_use"], "tool_use"),
        "stop sequence": (["text"], "stop_sequence"),
        "empty": (["text"], "end_turn"),
        "reasoning only": (["thinking"], "max_tokens"),
    }
    message = whole([CASES["tool use"][0]], "stop", choice_text=parsers())
    assert message["content"][0] == {"type": "thinking", "thinking": "Need data.", "signature": ""}
    assert message["content"][2]["input"] == {"city": "Oslo", "days": [1, 2]}
    assert whole([CASES["call cut by max_tokens"][0]], "length", choice_text=parsers(False))["content"][0]["input"] == {
        "city": "Oslo", "days": [1, 2]}
    stopped = whole(["Hello END"], "stop", stop_sequences=("END",))
    assert stopped["content"] == [{"type": "text", "text": "Hello "}] and stopped["stop_sequence"] == "END"


def test_every_event_is_an_sdk_type():
    for events in (stream(["<think>a</think>b", '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'],
                          choice_text=parsers()), stream([])):
        for event in events:
            EVENT.validate_json(event)
        assert [json.loads(event)["type"] for event in events][-2:] == ["message_delta", "message_stop"]


def test_a_tool_use_block_streams_its_input_as_partial_json():
    events = [json.loads(e) for e in stream(['<tool_call>{"name": "get_weather", "arguments": {"ci', 'ty": "X"}}',
                                             "</tool_call>"], choice_text=parsers(False))]
    start = next(e for e in events if e["type"] == "content_block_start")
    assert start["content_block"]["name"] == "get_weather" and start["content_block"]["input"] == {}
    partial = [e["delta"]["partial_json"] for e in events if e.get("delta", {}).get("type") == "input_json_delta"]
    assert "".join(partial) == '{"city": "X"}' and len(partial) == 2


@pytest.mark.parametrize(("stops", "pieces", "finish", "text", "matched"), [
    (("END",), ["Hello E", "N", "D"], "stop", "Hello ", "END"),
    (("END",), ["Hello E", "N"], "length", "Hello EN", None),  # the budget ran out: nothing matched
    (("END",), ["The ENDING"], "stop", "The ENDING", None),  # the engine stops at the end of a stop string
    (("bc", "abc"), ["xa", "bc"], "stop", "xa", "bc"),  # the first stop string in order, as vLLM picks it
    (("abc", "bc"), ["xa", "bc"], "stop", "x", "abc"),
    ((), ["a", "b"], "stop", "ab", None),
])
def test_stop_sequences(stops, pieces, finish, text, matched):
    events = stream(pieces, finish, stop_sequences=stops)
    message = reassembled(events)
    assert message["content"][0]["text"] == text and message["stop_sequence"] == matched
    assert message["stop_reason"] == ("stop_sequence" if matched else "end_turn" if finish == "stop" else "max_tokens")
    assert whole(pieces, finish, stop_sequences=stops)["content"][0]["text"] == text


def test_text_that_may_begin_a_stop_sequence_is_held_back():
    stops = StopSequences(("STOP",))
    assert stops.push("Hi S") == "Hi " and stops.push("T") == "" and stops.push("x") == "STx"
    assert stops.push("ST") == "" and stops.end(stopped=False) == ("ST", None)
    assert StopSequences().push("S") == "S"


@pytest.mark.parametrize(("finish", "reason"), [
    ("stop", "end_turn"), (None, "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal"),
    ("abort", "end_turn"), ("tool_calls", "end_turn"),
])
def test_stop_reasons(finish, reason):
    builder = make()
    builder.stream_output(0, GenerationOutput(text="x", finish_reason=finish, completion_tokens=1))
    delta = json.loads(builder.stream_finish(0)[-2])
    assert delta["delta"]["stop_reason"] == reason and builder.finish_reason(0) == reason


def test_text_after_a_call_in_the_same_delta_does_not_cut_the_call_short():
    blocks = Blocks(make_id=lambda: "toolu_x")
    blocks.add(Delta(tool_calls=[ToolCallDelta(index=0, id="c", name="f", arguments='{"a": ')]))
    events = blocks.add(Delta(content="done", tool_calls=[ToolCallDelta(index=0, arguments="1}")]))
    assert [json.loads(e)["type"] for e in events] == [
        "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta"]
    blocks.finish()
    assert blocks.content() == [{"type": "tool_use", "id": "toolu_x", "name": "f", "input": {"a": 1}},
                                {"type": "text", "text": "done"}]


def test_partial_input():
    assert partial_input('{"a": 1, "b": "Os') == {"a": 1}
    assert partial_input("[1, 2") == {} and partial_input("nonsense") == {}
