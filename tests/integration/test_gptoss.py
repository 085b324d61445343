"""gpt-oss (Harmony) through Triton: `openai_chat` with vLLM's two gpt-oss parsers
(`tool_call_parser: openai`, `reasoning_parser: openai_gptoss`) and a Harmony-format chat
template, in front of the scripted vLLM-interface model. The analysis channel is reasoning,
final is content, commentary calls to functions.* are tool calls; streamed equals whole."""

from __future__ import annotations

import json

import pytest

from tests.helpers import ChatClient, script, user
from tests.integration.test_tools import WEATHER, collect_stream

pytestmark = [pytest.mark.integration, pytest.mark.models("chat_gptoss")]

ANALYSIS = "<|channel|>analysis<|message|>The user wants the weather in Oslo.<|end|>"
CALL = ('<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json'
        '<|message|>{"city": "Oslo"}<|call|>')
FINAL = "<|start|>assistant<|channel|>final<|message|>It is sunny in Oslo, 22 °C.<|return|>"


@pytest.fixture
def gptoss(triton) -> ChatClient:
    return ChatClient(triton.http_url, "chat_gptoss")


def pieces(text: str, size: int = 7) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def test_the_engine_keeps_the_channel_markers_and_the_template_gets_the_effort(gptoss):
    _, body = gptoss.create({**user(script(echo_request=True)), "reasoning_effort": "high"})
    message = body["choices"][0]["message"]
    seen = json.loads(message["content"])  # no Harmony markers: the echo is content
    assert seen["sampling_parameters"]["skip_special_tokens"] is False
    prompt = seen["inputs"]["text_input"][0]
    assert "Reasoning: high" in prompt and prompt.endswith("<|start|>assistant")


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_and_a_tool_call(gptoss, stream):
    request = {**user(script(chunks=pieces(ANALYSIS + CALL))), "tools": [WEATHER], "stream": stream}
    if stream:
        result = gptoss.stream(request)
        assert result.error is None
        seen = collect_stream(result.chunks)
        calls = [(c["name"], c["arguments"]) for c in seen["calls"]]
        reasoning = "".join(c["choices"][0]["delta"].get("reasoning") or "" for c in result.chunks if c["choices"])
        content, finish = seen["content"], seen["finishes"]
    else:
        _, body = gptoss.create(request)
        message = body["choices"][0]["message"]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
        reasoning, content, finish = message["reasoning"], message["content"], [body["choices"][0]["finish_reason"]]
    assert calls == [("get_weather", '{"city": "Oslo"}')]
    assert reasoning == "The user wants the weather in Oslo."
    assert not content and finish == ["tool_calls"]


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_and_a_final_answer(gptoss, stream):
    history = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "reasoning": "Call the tool.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny", "c": 22}'},
        {"role": "user", "content": script(chunks=pieces(ANALYSIS + FINAL, 5))},
    ]
    request = {"messages": history, "tools": [WEATHER], "stream": stream}
    if stream:
        result = gptoss.stream(request)
        assert result.error is None
        reasoning = "".join(c["choices"][0]["delta"].get("reasoning") or "" for c in result.chunks if c["choices"])
        content = result.content
        finish = [c["choices"][0]["finish_reason"] for c in result.chunks if c["choices"]][-1]
        assert not any(c["choices"][0]["delta"].get("tool_calls") for c in result.chunks if c["choices"])
    else:
        _, body = gptoss.create(request)
        message = body["choices"][0]["message"]
        reasoning, content, finish = message["reasoning"], message["content"], body["choices"][0]["finish_reason"]
        assert message.get("tool_calls") in (None, [])
    assert reasoning == "The user wants the weather in Oslo."
    assert content == "It is sunny in Oslo, 22 °C." and finish == "stop"
