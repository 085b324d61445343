"""`anthropic_messages` on the real tritonserver: through `generate` / `generate_stream` and gRPC,
and through the gateway with the official `anthropic` SDK unchanged (create, stream, count_tokens,
errors, a tool round trip, thinking). `anthropic_scripted` (hermes and qwen3 parsers) is in front of
the scripted model; `anthropic_messages` in front of the tiny model on vLLM, compared with vLLM's own
`/v1/messages` server on the same model files, greedy.

Deliberate differences from vLLM's server (none shows in these conversations, which both render alike):
- an empty answer is one empty text block streamed as well as whole (vLLM streams no block);
- `thinking: disabled` sets the template's `enable_thinking: false` (vLLM: `reasoning_effort`, which
  the tiny model's Qwen3-style template ignores); `thinking.budget_tokens` is checked, not enforced;
- a final assistant message is continued (Anthropic's prefill; vLLM starts a new assistant turn);
- system text blocks are joined by "\\n" (vLLM: by ""); a `tool_result` with `is_error` starts with
  "Error: "; thinking blocks carry the signature "" (vLLM: a random one); ids are `msg_<request id>`.
"""

from __future__ import annotations

import json

import anthropic
import pytest
import requests
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from tests.helpers import ChatClient, GrpcChatClient, script, served_app
from tests.integration.test_client_gateway import wait_for
from tritonchat.clients.gateway import create_app

pytestmark = [pytest.mark.integration, pytest.mark.models("anthropic_scripted")]

API_KEY = "anthropic-test-key"
TOOLS = [{"name": "get_weather", "description": "The weather of a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CALL = ['<tool_call>\n{"name": "get_weather", "arguments": ', '{"city": "Oslo"}}\n</tool_call>']
EVENT = TypeAdapter(RawMessageStreamEvent)


def request(content: str = "Hi", **fields) -> dict:
    return {"model": "scripted", "max_tokens": 64, "messages": [{"role": "user", "content": content}], **fields}


def distinct(kinds: list[str]) -> list[str]:
    """Kinds without repeats in a row: outputs that arrive while a response is sent are merged,
    so the number of deltas varies."""
    return [kind for i, kind in enumerate(kinds) if not i or kinds[i - 1] != kind]


def blocks(message) -> list[dict]:
    """A message's content as the API sends it (a streamed one's blocks are the SDK's Parsed... kinds)."""
    return [{k: v for k, v in block.to_dict().items() if k != "parsed_output"} for block in message.content]


def reassembled(events: list[dict]) -> dict:
    snapshot, buffers = None, {}
    for event in events:
        snapshot = accumulate_event(event=EVENT.validate_python(event), current_snapshot=snapshot, json_bufs=buffers)
    message = snapshot.to_dict()
    message.pop("stop_details")
    return message


@pytest.fixture
def client(triton) -> ChatClient:
    return ChatClient(triton.http_url, "anthropic_scripted")


@pytest.fixture(scope="module")
def gateway(triton):
    app = create_app(triton.http_url, messages_model="anthropic_scripted", api_key=API_KEY)
    with served_app(app) as url:
        yield url


@pytest.fixture
def sdk(gateway):
    with anthropic.Anthropic(base_url=gateway, api_key=API_KEY, max_retries=0) as sdk:
        yield sdk


# ---- generate, generate_stream, gRPC ------------------------------------------------------


def test_generate_and_generate_stream(client):
    status, message = client.create(request(), request_id="42")
    assert status == 200 and Message.model_validate(message).content[0].text == "Hello world"
    assert message["id"] == "msg_42" and message["stop_reason"] == "end_turn"
    assert message["usage"]["output_tokens"] == 2
    result = client.stream(request(stream=True), request_id="43")
    assert result.status == 200 and result.error is None
    assert distinct([event["type"] for event in result.chunks]) == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]
    assert reassembled(result.chunks) == {**message, "id": "msg_43"}


def test_grpc(triton):
    grpc = GrpcChatClient(triton.grpc_url, "anthropic_scripted")
    events, error = grpc.stream(request(stream=True))
    assert error is None and reassembled(events)["content"] == [{"type": "text", "text": "Hello world"}]
    events, error = grpc.stream({"model": "scripted", "messages": [{"role": "user", "content": "Hi"}]})
    assert events == [] and json.loads(error.message()) == {
        "type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}}


def test_errors_over_generate(client):
    status, error = client.create(request(model="claude-sonnet-4-5"))
    assert status in (400, 404) and error["error"]["type"] == "not_found_error"  # 2.51 answers 400 for all
    status, error = client.create(request(temperature=2))
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    result = client.stream(request(script(error_after=1, error_message="boom"), stream=True))
    assert result.chunks[0]["type"] == "message_start"
    assert result.error["error"]["type"] == "api_error" and "boom" in result.error["error"]["message"]


def test_count_tokens_over_generate(client, tokenizer):
    status, count = client.create({"endpoint": "count_tokens", "model": "scripted", "system": "Be brief.",
                                   "messages": [{"role": "user", "content": "Hi"}]})
    text = tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                                         add_generation_prompt=True, tokenize=False)[len(tokenizer.bos_token):]
    assert status == 200 and count == {"input_tokens": len(tokenizer(text).input_ids)}


def test_stop_sequences_and_the_token_budget(client):
    stopping = request(script(chunks=["Hello", " EN", "D"]), stop_sequences=["STOP", "END"])
    status, message = client.create(stopping)
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")
    assert message["content"] == [{"type": "text", "text": "Hello "}]
    streamed = reassembled(client.stream({**stopping, "stream": True}).chunks)
    assert {**streamed, "id": None} == {**message, "id": None}
    status, echo = client.create(request(script(echo_request=True), stop_sequences=["END"]))
    sampling = json.loads(echo["content"][0]["text"])["sampling_parameters"]
    assert sampling["stop"] == ["END"] and sampling["include_stop_str_in_output"] is True
    status, message = client.create(request(script(finish_reason="length")))
    assert message["stop_reason"] == "max_tokens" and message["stop_sequence"] is None


# ---- the gateway and the anthropic SDK ----------------------------------------------------


def test_sdk_create_stream_and_count_tokens(sdk, tokenizer):
    message = sdk.messages.create(model="scripted", max_tokens=64, messages=[{"role": "user", "content": "Hi"}])
    assert message.content[0].text == "Hello world" and message.stop_reason == "end_turn"
    with sdk.messages.stream(model="scripted", max_tokens=64, messages=[{"role": "user", "content": "Hi"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello world" and blocks(final) == blocks(message) and final.usage == message.usage
    count = sdk.messages.count_tokens(model="scripted", messages=[{"role": "user", "content": "Hi"}], tools=TOOLS)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tools=[
        {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                          "parameters": t["input_schema"]}} for t in TOOLS],
        add_generation_prompt=True, tokenize=False)[len(tokenizer.bos_token):]
    assert count.input_tokens == len(tokenizer(prompt).input_ids)


def test_sdk_tool_use(sdk):
    fields = dict(model="scripted", max_tokens=64, tools=TOOLS, messages=[{"role": "user", "content": script(chunks=CALL)}])
    message = sdk.messages.create(**fields)
    [call] = message.content
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"city": "Oslo"}
    assert call.id.startswith("toolu_") and message.stop_reason == "tool_use"
    with sdk.messages.stream(**fields) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert "".join(e.delta.partial_json for e in events if e.type == "content_block_delta") == '{"city": "Oslo"}'
    assert final.content[0].input == {"city": "Oslo"} and final.stop_reason == "tool_use"
    named = sdk.messages.create(**{**fields, "messages": [{"role": "user", "content": script(chunks=['{"city": "Rome"}'])}]},
                                tool_choice={"type": "tool", "name": "get_weather"})
    assert named.content[0].input == {"city": "Rome"} and named.stop_reason == "tool_use"


def test_sdk_tool_round_trip(sdk):
    """A call, its result, the answer: the result and the call reach the model's prompt."""
    question = {"role": "user", "content": script(chunks=CALL)}
    first = sdk.messages.create(model="scripted", max_tokens=64, tools=TOOLS, messages=[question])
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": first.content[0].id,
                                           "content": "Sunny, 21 °C"}]}
    answer = sdk.messages.create(model="scripted", max_tokens=64, tools=TOOLS, tool_choice={"type": "none"},
                                 system=script(echo_request=True),  # the prompt's first script wins
                                 messages=[question, {"role": "assistant", "content": first.content}, result])
    prompt = json.loads(answer.content[0].text)["inputs"]["text_input"][0]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in prompt
    assert prompt.endswith("<tool_response>\nSunny, 21 °C\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert answer.stop_reason == "end_turn"


def test_sdk_thinking(sdk):
    fields = dict(model="scripted", max_tokens=1500, thinking={"type": "enabled", "budget_tokens": 1024},
                  messages=[{"role": "user", "content": script(chunks=["<think>Let me", " see.</think>", "Sunny."])}])
    message = sdk.messages.create(**fields)
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in message.content] == [
        ("thinking", "Let me see."), ("text", "Sunny.")]
    assert message.content[0].signature == ""
    with sdk.messages.stream(**fields) as stream:
        kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert distinct(kinds) == ["thinking_delta", "text_delta"] and blocks(final) == blocks(message)


def test_sdk_errors(sdk, gateway):
    with pytest.raises(anthropic.BadRequestError) as info:
        sdk.messages.create(model="scripted", max_tokens=64, messages=[{"role": "user", "content": "Hi"}],
                            extra_body={"temperature": 3})  # the SDK no longer takes temperature itself
    assert info.value.status_code == 400 and info.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError) as info:
        sdk.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "Hi"}])
    assert info.value.body == {"type": "error", "error": {"type": "not_found_error", "message": (
        "The model 'claude-sonnet-4-5' does not exist; this server serves 'scripted'.")}}
    with pytest.raises(anthropic.BadRequestError, match="Extra inputs are not permitted"):
        sdk.messages.count_tokens(model="scripted", messages=[{"role": "user", "content": "Hi"}],
                                  extra_body={"max_tokens": 5})
    with pytest.raises(anthropic.APIStatusError, match="boom"):  # after the first events: an error event
        with sdk.messages.stream(model="scripted", max_tokens=64, messages=[
                {"role": "user", "content": script(error_after=1, error_message="boom")}]) as stream:
            stream.get_final_message()
    with anthropic.Anthropic(base_url=gateway, api_key="wrong", max_retries=0) as stranger:
        with pytest.raises(anthropic.AuthenticationError):
            stranger.messages.create(model="scripted", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    with requests.post(gateway + "/v1/messages", json=request(stream=True), stream=True, timeout=30,
                       headers={"x-api-key": API_KEY}) as r:
        lines = r.text.splitlines()
    assert lines[:2] == ["event: message_start", lines[1]] and lines[1].startswith('data: {"type":"message_start"')
    assert lines[-3:] == ["event: message_stop", 'data: {"type":"message_stop"}', ""]


def test_closing_an_sdk_stream_cancels_the_request(sdk, triton):
    long = script(repeat={"text": "x", "count": 400}, interval_ms=20)
    with sdk.messages.stream(model="scripted", max_tokens=1024, messages=[{"role": "user", "content": long}]) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                break
        message_id = stream.current_message_snapshot.id
    assert wait_for(triton.log_path, f"{message_id}: The request was cancelled by the client")


# ---- the real engine, against vLLM's own /v1/messages -------------------------------------

CASES = {
    "system and user": {"system": "Be brief.", "messages": [{"role": "user", "content": "Hi there!"}]},
    "multi-turn": {"messages": [{"role": "user", "content": "Name a river."},
                                {"role": "assistant", "content": "The Nile."},
                                {"role": "user", "content": "And a mountain?"}]},
    "text blocks": {"messages": [{"role": "user", "content": [{"type": "text", "text": "Part one."},
                                                              {"type": "text", "text": "Part two."}]}]},
    "max tokens": {"messages": [{"role": "user", "content": "Count to ten."}], "max_tokens": 5},
    "tools, none chosen": {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": TOOLS,
                           "tool_choice": {"type": "none"}},
    "tool history": {"tools": TOOLS, "tool_choice": {"type": "none"}, "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "get_weather",
                                           "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny"}]}]},
}


def vllm_messages(url: str, path: str, body: dict) -> dict:
    response = requests.post(f"{url}{path}", json={**body, "model": "tiny-chat"}, timeout=120)
    response.raise_for_status()
    return response.json()


def same(ours: dict, theirs: dict) -> None:
    text = lambda message: "".join(b.get("text", "") for b in message["content"])  # noqa: E731
    assert text(ours) == text(theirs)
    assert (ours["stop_reason"], ours["stop_sequence"]) == (theirs["stop_reason"], theirs.get("stop_sequence"))
    assert {k: ours["usage"][k] for k in ("input_tokens", "output_tokens")} == {
        k: theirs["usage"][k] for k in ("input_tokens", "output_tokens")}


@pytest.mark.models("anthropic_messages")
@pytest.mark.parametrize("case", list(CASES))
def test_same_message_as_vllms_server(vllm_server, triton, case):
    body = {"max_tokens": 24, "temperature": 0, **CASES[case]}
    theirs = vllm_messages(vllm_server, "/v1/messages", body)
    _, ours = ChatClient(triton.http_url, "anthropic_messages").create({**body, "model": "tiny-chat"})
    same(ours, theirs)
    counted = {k: v for k, v in body.items() if k in ("messages", "system", "tools", "tool_choice")}
    theirs_count = vllm_messages(vllm_server, "/v1/messages/count_tokens", counted)
    _, ours_count = ChatClient(triton.http_url, "anthropic_messages").create(
        {**counted, "model": "tiny-chat", "endpoint": "count_tokens"})
    assert ours_count == {"input_tokens": theirs_count["input_tokens"]} == {"input_tokens": ours["usage"]["input_tokens"]}


@pytest.mark.models("anthropic_messages")
def test_same_stop_sequence_and_stream_as_vllms_server(vllm_server, triton):
    base = {"max_tokens": 24, "temperature": 0, **CASES["system and user"]}
    text = "".join(b["text"] for b in vllm_messages(vllm_server, "/v1/messages", base)["content"])
    stop = next(text[i: i + 2] for i in range(5, len(text) - 2) if text[i: i + 2].strip())
    body = {**base, "stop_sequences": ["NEVER", stop]}
    theirs = vllm_messages(vllm_server, "/v1/messages", body)
    client = ChatClient(triton.http_url, "anthropic_messages")
    _, ours = client.create({**body, "model": "tiny-chat"})
    assert ours["stop_reason"] == "stop_sequence" and ours["stop_sequence"] == stop
    same(ours, theirs)
    streamed = client.stream({**body, "model": "tiny-chat", "stream": True})
    same(reassembled(streamed.chunks), theirs)
