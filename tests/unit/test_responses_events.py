"""OpenAI's Responses `response` and stream events from generation outputs: the layout, every
event a valid `openai` SDK type, a stream reassembled (its deltas folded into its items, and by
the SDK's own stream reader) equal to the whole response however the text was split, function
calls with their argument deltas, reasoning, the token budget, usage with reasoning tokens."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tritonchat.choice_text import ChoiceText
from tritonchat.formats import GenerationOutput
from tritonchat.parsers.base import Delta, get_reasoning_parser, get_tool_parser
from tritonchat.responses.events import OutputItems, ResponsesBuilder
from tritonchat.tool_choice import NamedToolParser

EVENT = TypeAdapter(ResponseStreamEvent)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
FIELDS = {"instructions": None, "max_output_tokens": None, "max_tool_calls": None, "parallel_tool_calls": True,
          "previous_response_id": None, "reasoning": {"effort": None, "summary": None}, "temperature": 1.0,
          "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto", "tools": [],
          "top_p": 1.0, "truncation": "disabled", "user": None, "metadata": {}}
CALL = ['<tool_call>\n{"name": "get_weather", "arguments": ', '{"city": ', '"Oslo"}}\n</tool_call>']
THINKING = ["<think>Let me", " see.</think>", "Sunny", " today."]


def parsers(reasoning: bool = True, tools: bool = True):
    ids = itertools.count()

    def make() -> ChoiceText:
        return ChoiceText(get_reasoning_parser("qwen3")(False) if reasoning else None,
                          get_tool_parser("hermes")(TOOLS, lambda: f"call_{next(ids)}") if tools else None)
    return make


def make(**kwargs) -> ResponsesBuilder:
    ids = itertools.count()
    return ResponsesBuilder(completion_id="resp_1", created=1, model="tiny", system_fingerprint="fp",
                            prompt_tokens=5, fields=FIELDS, make_id=lambda kind: f"{kind}_{next(ids)}",
                            clock=lambda: 2.0, **kwargs)


def outputs(pieces: list[str], finish: str) -> list[GenerationOutput]:
    out = [GenerationOutput(text=piece, completion_tokens=1) for piece in pieces] or [GenerationOutput()]
    out[0].prompt_tokens = 7  # the engine's count wins over the builder's
    out[-1].finish_reason = finish
    return out


def stream(pieces: list[str], finish: str = "stop", **kwargs) -> list[dict]:
    builder = make(**kwargs)
    events = [event for output in outputs(pieces, finish) for event in builder.stream_output(0, output)]
    events += builder.stream_finish(0)
    for event in events:
        EVENT.validate_json(event)
    return [json.loads(event) for event in events]


def whole(pieces: list[str], finish: str = "stop", **kwargs) -> dict:
    builder = make(**kwargs)
    for output in outputs(pieces, finish):
        builder.add_output(0, output)
    response = builder.completion()
    Response.model_validate_json(response)
    return json.loads(response)


def reassembled(events: list[dict]) -> list[dict]:
    """The output items a stream builds: each added item with its deltas folded in, checked
    against its own done events."""
    items: dict[int, dict] = {}
    for event in events:
        kind, index = event["type"], event.get("output_index")
        if kind == "response.output_item.added":
            items[index] = {**event["item"], "text": ""}
        elif kind.endswith(".delta"):
            assert event["item_id"] == items[index]["id"]
            items[index]["text"] += event["delta"]
        elif kind in ("response.output_text.done", "response.reasoning_text.done"):
            assert event["text"] == items[index]["text"]
        elif kind == "response.function_call_arguments.done":
            assert event["arguments"] == items[index]["text"] and event["name"] == items[index]["name"]
        elif kind == "response.output_item.done":
            item = items[index]
            text = item.pop("text")
            if item["type"] == "function_call":
                item["arguments"] = text
            else:
                item["content"] = [event["item"]["content"][0] | {"text": text}]
            items[index] = {**item, "status": event["item"]["status"]}
            assert items[index] == event["item"]
    return [items[index] for index in sorted(items)]


def sdk_final(events: list[dict]) -> dict:
    """The response the `openai` SDK's `responses.stream` reader makes of the events."""
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(EVENT.validate_python(event))
    final = state._completed_response.to_dict()
    for item in final["output"]:
        item.pop("parsed_arguments", None)
        for part in item.get("content") or []:
            part.pop("parsed", None)
    return final


def test_text_streams_as_one_message_item():
    events = stream(["Hello", " world"])
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(10))
    created = events[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    assert events[2]["item"] == {"id": "message_0", "type": "message", "status": "in_progress", "content": [],
                                 "role": "assistant"}
    final = events[-1]["response"]
    assert final == whole(["Hello", " world"]) == sdk_final(events)
    assert final["output"] == [{"id": "message_0", "type": "message", "status": "completed", "role": "assistant",
                                "content": [{"type": "output_text", "annotations": [], "logprobs": [],
                                             "text": "Hello world"}]}]
    assert final["usage"] == {"input_tokens": 7, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                              "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 9}
    assert (final["status"], final["completed_at"], final["incomplete_details"]) == ("completed", 2, None)
    assert list(final)[:8] == ["id", "object", "created_at", "status", "background", "completed_at", "error",
                               "incomplete_details"]


def test_reasoning_text_and_a_function_call():
    events = stream(THINKING + CALL, choice_text=parsers(), count_tokens=lambda text: len(text.split()))
    final = events[-1]["response"]
    assert reassembled(events) == final["output"]
    reasoning, message, call = final["output"]
    assert reasoning == {"id": "reasoning_0", "type": "reasoning", "status": "completed", "summary": [],
                         "content": [{"type": "reasoning_text", "text": "Let me see."}]}
    assert message["content"][0]["text"] == "Sunny today."
    assert call == {"id": "function_call_2", "type": "function_call", "status": "completed",
                    "arguments": '{"city": "Oslo"}', "call_id": "call_0", "name": "get_weather"}
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert len(deltas) >= 2 and "".join(deltas) == '{"city": "Oslo"}'
    assert [e["type"] for e in events if "reasoning" in e["type"]] == [
        "response.reasoning_text.delta", "response.reasoning_text.delta", "response.reasoning_text.done"]
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 3}  # "Let me see." by the counter
    assert final == whole(THINKING + CALL, choice_text=parsers(), count_tokens=lambda text: len(text.split()))
    assert final == sdk_final(events)


@pytest.mark.parametrize("seed", range(12))
def test_a_stream_reassembled_is_the_whole_response_however_split(seed):
    rng = random.Random(seed)
    text = "".join(THINKING + CALL[:1]) + '{"city": "Oslo", "days": [1, 2]}}\n</tool_call>'
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 12)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    events = stream(pieces, choice_text=parsers(), count_tokens=len)
    expected = whole([text], choice_text=parsers(), count_tokens=len)
    expected["usage"]["output_tokens"] = len(pieces)
    expected["usage"]["total_tokens"] = 7 + len(pieces)
    expected["usage"]["output_tokens_details"]["reasoning_tokens"] = min(len("Let me see."), len(pieces))
    assert reassembled(events) == events[-1]["response"]["output"]
    assert events[-1]["response"] == expected == sdk_final(events)


def test_the_budget_leaves_the_open_item_incomplete():
    events = stream(["Hello", " wor"], finish="length")
    assert events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    assert (final["status"], final["incomplete_details"], final["completed_at"]) == (
        "incomplete", {"reason": "max_output_tokens"}, None)
    assert final["output"][0]["status"] == "incomplete" and reassembled(events) == final["output"]
    assert whole(["Hello", " wor"], finish="length") == final
    cut_call = stream(CALL[:2], finish="length", choice_text=parsers())
    [call] = cut_call[-1]["response"]["output"]
    assert (call["status"], call["arguments"]) == ("incomplete", '{"city": ')
    filtered = stream(["x"], finish="content_filter")[-1]["response"]
    assert filtered["incomplete_details"] == {"reason": "content_filter"}


def test_reasoning_tokens_are_counted_even_when_reasoning_is_left_out():
    kwargs = {"choice_text": parsers(tools=False), "include_reasoning": False, "count_tokens": len}
    events = stream(THINKING, **kwargs)  # no tool parser: no call ids to differ
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message"]
    assert not any("reasoning" in e["type"] for e in events)
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 4  # at most the output's 4 tokens
    assert whole(THINKING, **kwargs) == final


def test_a_named_tool_choice_and_an_empty_answer():
    named = lambda: ChoiceText(None, NamedToolParser("get_weather", lambda: "call_x"))  # noqa: E731
    final = stream(['{"city"', ': "Rome"}'], choice_text=named)[-1]["response"]
    assert final["output"] == [{"id": "function_call_0", "type": "function_call", "status": "completed",
                                "arguments": '{"city": "Rome"}', "call_id": "call_x", "name": "get_weather"}]
    empty = stream([])
    assert [e["type"] for e in empty] == ["response.created", "response.in_progress", "response.completed"]
    assert empty[-1]["response"]["output"] == [] == whole([])["output"]


def test_text_after_a_call_is_a_second_message_when_streamed():
    """The one difference between a stream and a whole response (see events.py)."""
    pieces = ["Checking.", *CALL, " Done."]
    streamed = stream(pieces, choice_text=parsers(reasoning=False))[-1]["response"]["output"]
    assert [item["type"] for item in streamed] == ["message", "function_call", "message"]
    complete = whole(pieces, choice_text=parsers(reasoning=False))["output"]
    assert [item["type"] for item in complete] == ["message", "function_call"]
    assert complete[0]["content"][0]["text"] == "Checking. Done."


def test_items_within_one_delta():
    """Reasoning, the open call's arguments, content, then new calls: the order a model writes them."""
    numbers = itertools.count()
    items = OutputItems(lambda: next(numbers), make_id=lambda kind: kind)
    items.add(Delta(reasoning="r", content="c"))
    events = [json.loads(e) for e in items.finish(incomplete=False)]
    assert [item["type"] for item in items.output()] == ["reasoning", "message"]
    assert [e["sequence_number"] for e in events] == [9, 10, 11]  # 2 + 2 + 2 added/part events, 2 deltas, 3 done
