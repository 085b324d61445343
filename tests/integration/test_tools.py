"""Tool calls and reasoning through real tritonserver: the scripted models write exactly what
a Qwen-style model would, and `chat_tools` parses it (hermes + qwen3), over every request
format; named and required tool choices also run on the tiny model in vLLM with generation
constrained."""

from __future__ import annotations

import json

import jsonschema
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.helpers import ChatClient, script

pytestmark = [pytest.mark.integration, pytest.mark.models("chat_tools")]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Oslo", "Lima"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}

REASONING = "Let me check the weather."
CONTENT = "Checking now."
CALLS_TEXT = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
)
OUTPUT = f"<think>\n{REASONING}\n</think>\n\n{CONTENT}\n{CALLS_TEXT}"


def pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def ask(output: str, **fields) -> dict:
    return {"messages": [{"role": "user", "content": script(chunks=pieces(output), interval_ms=1)}], "tools": [WEATHER, TIME], **fields}


def collect_stream(chunks: list[dict]) -> dict:
    reasoning, content, calls, finishes = "", "", {}, []
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
        for choice in chunk["choices"]:
            delta = choice["delta"]
            assert "reasoning_content" not in delta  # vLLM's current name is the default
            reasoning += delta.get("reasoning") or ""
            content += delta.get("content") or ""
            for piece in delta.get("tool_calls") or []:
                if "id" in piece:
                    assert piece["index"] == len(calls) and piece["type"] == "function"
                    assert piece["function"]["name"]
                    calls[piece["index"]] = {"id": piece["id"], "name": piece["function"]["name"], "arguments": ""}
                else:
                    assert set(piece) == {"index", "function"} and set(piece["function"]) == {"arguments"}
                calls[piece["index"]]["arguments"] += piece["function"].get("arguments", "")
            if choice["finish_reason"]:
                finishes.append(choice["finish_reason"])
    return {"reasoning": reasoning, "content": content, "calls": list(calls.values()), "finishes": finishes}


def test_auto_tool_calls_and_reasoning_whole(chat_tools):
    status, body = chat_tools.create(ask(OUTPUT))
    assert status == 200
    ChatCompletion.model_validate(body)
    choice = body["choices"][0]
    message = choice["message"]
    assert choice["finish_reason"] == "tool_calls"
    assert message["reasoning"].strip() == REASONING
    assert message["content"].strip() == CONTENT
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("get_weather", {"city": "Oslo", "days": 2}), ("get_time", {})]
    assert len({c["id"] for c in message["tool_calls"]}) == 2


@pytest.mark.parametrize("interval", [None, 5], ids=["each-output", "stream_interval-5"])
def test_auto_tool_calls_and_reasoning_streamed(chat_tools, interval):
    """Also with outputs merged five tokens at a time (`stream_interval`): the parsers see
    larger pieces, the client assembles the same answer."""
    _, whole = chat_tools.create(ask(OUTPUT))
    extra = {"stream_interval": interval} if interval else {}
    result = chat_tools.stream({**ask(OUTPUT), "stream": True, **extra})
    assert result.error is None
    seen = collect_stream(result.chunks)
    if interval:
        assert len(result.chunks) < len(pieces(OUTPUT)) // 2, "chunks hold several outputs each"
    assert seen["finishes"] == ["tool_calls"]
    message = whole["choices"][0]["message"]
    assert seen["reasoning"] == message["reasoning"]
    assert seen["content"] == message["content"]
    assert [(c["name"], c["arguments"]) for c in seen["calls"]] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    for text in (seen["reasoning"], seen["content"]):
        assert "<tool" not in text and "<think" not in text and "</" not in text


def test_plain_answer_with_tools_offered(chat_tools):
    _, body = chat_tools.create(ask("Just sunny."))
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"]["content"] == "Just sunny."
    assert "tool_calls" not in body["choices"][0]["message"]


def test_tool_choice_none_does_not_parse(chat_tools):
    _, body = chat_tools.create(ask(CALLS_TEXT, tool_choice="none"))
    assert body["choices"][0]["message"]["content"] == CALLS_TEXT
    assert body["choices"][0]["finish_reason"] == "stop"


def test_parallel_tool_calls_false_keeps_the_first(chat_tools):
    _, body = chat_tools.create(ask(OUTPUT, parallel_tool_calls=False))
    assert [c["function"]["name"] for c in body["choices"][0]["message"]["tool_calls"]] == ["get_weather"]
    result = chat_tools.stream({**ask(OUTPUT, parallel_tool_calls=False), "stream": True})
    assert [c["name"] for c in collect_stream(result.chunks)["calls"]] == ["get_weather"]


def refused_without_constrained_generation(chat_tools, request: dict) -> bool:
    """TensorRT-LLM's LLM API model has no guided-decoding input: a named or required
    tool_choice is a 400, as response_format is."""
    if chat_tools.fmt != "llmapi":
        return False
    status, body = chat_tools.create(request)
    assert status == 400 and body["error"]["param"] == "response_format", body
    return True


def test_named_tool_choice(chat_tools):
    named = {"type": "function", "function": {"name": "get_weather"}}
    arguments = '{"city": "Lima", "days": 3}'
    if refused_without_constrained_generation(chat_tools, ask(arguments, tool_choice=named)):
        return
    _, body = chat_tools.create(ask(arguments, tool_choice=named))
    message = body["choices"][0]["message"]
    assert body["choices"][0]["finish_reason"] == "stop"
    assert message["content"] is None
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [("get_weather", arguments)]
    result = chat_tools.stream({**ask(arguments, tool_choice=named), "stream": True})
    seen = collect_stream(result.chunks)
    assert [(c["name"], c["arguments"]) for c in seen["calls"]] == [("get_weather", arguments)] and seen["finishes"] == ["stop"]


def test_named_tool_choice_constrains_generation(chat_tools):
    """vLLM: structured outputs; TensorRT-LLM: guided decoding, with the function's parameters."""
    named = {"type": "function", "function": {"name": "get_weather"}}
    request = {**ask("x", tool_choice=named), "messages": [{"role": "user", "content": script(echo_request=True)}]}
    if refused_without_constrained_generation(chat_tools, request):
        return
    _, echoed = chat_tools.create(request)
    # The echo is what the constrained model "generated": the call's arguments.
    seen = json.loads(echoed["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
    if chat_tools.fmt == "vllm":
        assert json.loads(seen["sampling_parameters"]["structured_outputs"]) == {"json": WEATHER["function"]["parameters"]}
    else:
        inputs = seen["inputs"]
        assert inputs["guided_decoding_guide_type"]["value"] == [["json_schema"]]
        assert json.loads(inputs["guided_decoding_guide"]["value"][0][0]) == WEATHER["function"]["parameters"]


def test_required_tool_choice(chat_tools):
    output = '[{"name": "get_time", "parameters": {}}, {"name": "get_weather", "parameters": {"city": "Oslo", "days": 1}}]'
    if refused_without_constrained_generation(chat_tools, ask(output, tool_choice="required")):
        return
    _, body = chat_tools.create(ask(output, tool_choice="required"))
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    calls = body["choices"][0]["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_time", {}), ("get_weather", {"city": "Oslo", "days": 1})]
    result = chat_tools.stream({**ask(output, tool_choice="required"), "stream": True})
    seen = collect_stream(result.chunks)
    assert [(c["name"], c["arguments"]) for c in seen["calls"]] == [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
    assert seen["finishes"] == ["tool_calls"]


def test_tool_history_reaches_the_template(triton):
    chat_tools = ChatClient(triton.http_url, "chat_tools")  # (the prompt is read from the vLLM-interface echo)
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
        {"role": "user", "content": script(echo_request=True)},
    ]
    _, body = chat_tools.create({"messages": messages, "tools": [WEATHER], "tool_choice": "none"})
    prompt = json.loads(body["choices"][0]["message"]["content"])["inputs"]["text_input"][0]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 1}}\n</tool_call>' in prompt
    assert "<tool_response>\n-3 C\n</tool_response>" in prompt
    assert "\"name\": \"get_weather\"" in prompt.split("<tools>")[-1]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tool_choice": "required", "tools": None}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": []}, "tools"),
    ],
)
def test_tool_mistakes(chat_tools, fields, param):
    request = {**ask("x"), **fields}
    if request.get("tools") is None:
        request.pop("tools")
    status, body = chat_tools.create(request)
    assert status == 400 and body["error"]["param"] == param


def test_auto_needs_a_parser(tiny):
    status, body = tiny.create({"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER]})
    assert status == 400 and body["error"]["param"] == "tool_choice"


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_on_the_engine(tiny, stream):
    request = {"messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER, TIME], "temperature": 0,
               "max_tokens": 64, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    if stream:
        calls = collect_stream(tiny.stream({**request, "stream": True}).chunks)["calls"]
        arguments = calls[0]["arguments"]
    else:
        _, body = tiny.create(request)
        assert body["choices"][0]["finish_reason"] == "stop"
        arguments = body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    jsonschema.validate(json.loads(arguments), WEATHER["function"]["parameters"])


def test_required_tools_on_the_engine(tiny):
    request = {"messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER, TIME], "temperature": 0,
               "max_tokens": 96, "tool_choice": "required", "parallel_tool_calls": False}
    _, body = tiny.create(request)
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    calls = body["choices"][0]["message"]["tool_calls"]
    assert calls
    for call in calls:
        schema = {"get_weather": WEATHER, "get_time": TIME}[call["function"]["name"]]["function"]["parameters"]
        jsonschema.validate(json.loads(call["function"]["arguments"]), schema)


def test_include_reasoning_false_leaves_reasoning_out(chat_tools):
    """vLLM's `include_reasoning: false`: the parsed-out reasoning is not sent, streamed or whole;
    content and tool calls are unchanged."""
    _, whole = chat_tools.create(ask(OUTPUT))
    _, bare = chat_tools.create({**ask(OUTPUT), "include_reasoning": False})
    message = bare["choices"][0]["message"]
    assert "reasoning" not in message and message["content"] == whole["choices"][0]["message"]["content"]
    assert [c["function"] for c in message["tool_calls"]] == [
        c["function"] for c in whole["choices"][0]["message"]["tool_calls"]]
    result = chat_tools.stream({**ask(OUTPUT), "stream": True, "include_reasoning": False})
    seen = collect_stream(result.chunks)
    assert seen["reasoning"] == "" and seen["content"] == message["content"]
    assert not any("reasoning" in c["delta"] for chunk in result.chunks for c in chunk["choices"])
