"""`openai_responses` on the real tritonserver: through `generate` / `generate_stream` and gRPC,
and through the gateway with the official `openai` SDK unchanged (create, stream, errors, a
function call, a tool round trip, reasoning). `responses_scripted` (hermes and qwen3 parsers) is
in front of the scripted model; `openai_responses` in front of the tiny model on vLLM, compared
with vLLM's own `/v1/responses` server on the same model files, greedy: same text, status and
token counts.

Deliberate differences from vLLM's server (none changes the text or the counts compared here):
- a response cut by `max_output_tokens` ends its stream with `response.incomplete`, as OpenAI's
  does (vLLM: `response.completed` carrying `status: "incomplete"`), and the item the budget cut
  is `incomplete` (vLLM: `completed`);
- the echoed `temperature` / `top_p` are the request's, else 1.0 (vLLM: the engine's defaults from
  the model's generation_config), `max_output_tokens` the request's (vLLM: the budget it computed);
- `store` is false (nothing is stored; vLLM keeps responses only with VLLM_ENABLE_RESPONSES_API_STORE),
  and `previous_response_id`, `background`, `truncation: auto`, `top_logprobs` and log probabilities
  are refused with a 400 naming them; unknown fields too (vLLM ignores them);
- an assistant message item's text parts are joined (vLLM: its first part only);
- an empty answer has no output item, streamed and whole (vLLM without a parser: an empty message
  item when whole);
- ids are `resp_<request id>` and random `msg_`/`rs_`/`fc_` item ids;
- the prompt has one BOS where vLLM's /v1/responses has two (see ONE_BOS below).
"""

from __future__ import annotations

import json

import openai
import pytest
import requests
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.helpers import ChatClient, GrpcChatClient, script, served_app
from tests.integration.test_client_gateway import wait_for
from tritonchat.clients.gateway import create_app

pytestmark = [pytest.mark.integration, pytest.mark.models("responses_scripted")]

API_KEY = "responses-test-key"
TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather of a city", "strict": True,
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
CALL = ['<tool_call>\n{"name": "get_weather", "arguments": ', '{"city": "Oslo"}}\n</tool_call>']
THINKING = ["<think>Let me", " see.</think>", "Sunny."]
EVENT = TypeAdapter(ResponseStreamEvent)


def request(text: str = "Hi", **fields) -> dict:
    return {"model": "scripted", "input": text, "max_output_tokens": 64, **fields}


def distinct(kinds: list[str]) -> list[str]:
    """Kinds without repeats in a row: outputs that arrive while a response is sent are merged,
    so the number of deltas varies."""
    return [kind for i, kind in enumerate(kinds) if not i or kinds[i - 1] != kind]


def normalized(response: dict) -> dict:
    """A response without what differs between two requests for the same answer (ids, times)."""
    drop = ("id", "created_at", "completed_at")
    output = [{k: v for k, v in item.items() if k not in ("id", "call_id", "parsed_arguments")}
              for item in response["output"]]
    for item in output:
        for part in item.get("content") or []:
            part.pop("parsed", None)
    return {**{k: v for k, v in response.items() if k not in drop}, "output": output}


def folded(events: list[dict]) -> dict:
    """The last event's response, checked against the stream's own deltas and items."""
    texts: dict[int, str] = {}
    for event in events:
        EVENT.validate_python(event)
        if event["type"].endswith(".delta"):
            texts[event["output_index"]] = texts.get(event["output_index"], "") + event["delta"]
        elif event["type"] == "response.output_item.done":
            item = event["item"]
            done = item.get("arguments") if item["type"] == "function_call" else item["content"][0]["text"]
            assert done == texts.get(event["output_index"], "")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert final["output"] == [e["item"] for e in events if e["type"] == "response.output_item.done"]
    return final


@pytest.fixture
def client(triton) -> ChatClient:
    return ChatClient(triton.http_url, "responses_scripted")  # the generate extension


@pytest.fixture(scope="module")
def gateway(triton):
    app = create_app(triton.http_url, responses_model="responses_scripted", api_key=API_KEY)
    with served_app(app) as url:
        yield url


@pytest.fixture
def sdk(gateway):
    with openai.OpenAI(base_url=f"{gateway}/v1", api_key=API_KEY, max_retries=0) as sdk:
        yield sdk


# ---- generate, generate_stream, gRPC ------------------------------------------------------


def test_generate_and_generate_stream(client):
    status, response = client.create(request(), request_id="42")
    assert status == 200 and Response.model_validate(response).output_text == "Hello world"
    assert response["id"] == "resp_42" and response["status"] == "completed"
    assert response["usage"]["output_tokens"] == 2 and response["max_output_tokens"] == 64
    result = client.stream(request(stream=True), request_id="43")
    assert result.status == 200 and result.error is None
    assert distinct([event["type"] for event in result.chunks]) == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]
    final = folded(result.chunks)
    assert final["id"] == "resp_43" and normalized(final) == normalized(response)


def test_grpc(triton):
    grpc = GrpcChatClient(triton.grpc_url, "responses_scripted")
    events, error = grpc.stream(request(stream=True))
    assert error is None and Response.model_validate(folded(events)).output_text == "Hello world"
    events, error = grpc.stream({**request(), "foo": 1})
    assert events == [] and json.loads(error.message()) == {"error": {
        "message": "Unknown parameter: 'foo'.", "type": "invalid_request_error", "param": "foo",
        "code": "unknown_parameter"}}


def test_errors_over_generate(client):
    status, error = client.create(request(model="gpt-5"))
    assert status in (400, 404) and error["error"]["code"] == "model_not_found"  # 2.51 answers 400 for all
    status, error = client.create(request(max_output_tokens=100_000))
    assert error["error"]["param"] == "max_output_tokens" and error["error"]["code"] == "context_length_exceeded"
    result = client.stream(request(script(error_after=1, error_message="boom"), stream=True))
    assert result.chunks[0]["type"] == "response.created"
    assert result.error["error"]["type"] == "server_error" and "boom" in result.error["error"]["message"]


def test_the_token_budget_leaves_the_response_incomplete(client):
    cut = request(script(chunks=["Hello", " wor"], finish_reason="length"))
    _, response = client.create(cut)
    assert (response["status"], response["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert response["output"][0]["status"] == "incomplete"
    events = client.stream({**cut, "stream": True}).chunks
    assert events[-1]["type"] == "response.incomplete" and normalized(folded(events)) == normalized(response)


# ---- the gateway and the openai SDK -------------------------------------------------------


def test_sdk_create_and_stream(sdk):
    response = sdk.responses.create(model="scripted", input="Hi", instructions="Be brief.", max_output_tokens=64,
                                    metadata={"k": "v"})
    assert response.output_text == "Hello world" and response.status == "completed"
    assert (response.instructions, response.metadata, response.max_output_tokens) == ("Be brief.", {"k": "v"}, 64)
    with sdk.responses.stream(model="scripted", input="Hi", instructions="Be brief.", max_output_tokens=64,
                              metadata={"k": "v"}) as stream:
        text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == "Hello world" and normalized(final.to_dict()) == normalized(response.to_dict())


def test_sdk_function_call(sdk):
    fields = dict(model="scripted", tools=TOOLS, input=[{"role": "user", "content": script(chunks=CALL)}])
    response = sdk.responses.create(**fields)
    [call] = response.output
    assert (call.type, call.name, call.arguments, call.status) == ("function_call", "get_weather", '{"city": "Oslo"}',
                                                                    "completed")
    assert call.call_id.startswith("call_") and call.id.startswith("fc_") and response.tools[0].name == "get_weather"
    with sdk.responses.stream(**fields) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert "".join(deltas) == '{"city": "Oslo"}' and final.output[0].arguments == '{"city": "Oslo"}'
    assert final.output[0].parsed_arguments == {"city": "Oslo"}  # the SDK parses a strict tool's arguments
    named = sdk.responses.create(**{**fields, "input": script(chunks=['{"city": "Rome"}'])},
                                 tool_choice={"type": "function", "name": "get_weather"})
    assert named.output[0].arguments == '{"city": "Rome"}'


def test_sdk_tool_round_trip(sdk):
    """A call, its output, the answer: the call and its output reach the model's prompt."""
    question = {"role": "user", "content": script(chunks=CALL)}
    first = sdk.responses.create(model="scripted", tools=TOOLS, input=[question])
    call = first.output[0]
    answer = sdk.responses.create(
        model="scripted", tools=TOOLS, tool_choice="none", instructions=script(echo_request=True),  # first script wins
        input=[question, *first.output, {"type": "function_call_output", "call_id": call.call_id,
                                         "output": "Sunny, 21 °C"}])
    prompt = json.loads(answer.output_text)["inputs"]["text_input"][0]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in prompt
    assert prompt.endswith("<tool_response>\nSunny, 21 °C\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert answer.status == "completed"


def test_sdk_reasoning(sdk, tokenizer):
    fields = dict(model="scripted", reasoning={"effort": "high"},
                  input=script(chunks=THINKING, tokens_per_chunk=10))
    response = sdk.responses.create(**fields)
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.summary == [] and reasoning.content[0].text == "Let me see."
    assert message.content[0].text == "Sunny." and response.reasoning.effort == "high"
    counted = len(tokenizer("Let me see.", add_special_tokens=False).input_ids)
    assert response.usage.output_tokens == 30 and response.usage.output_tokens_details.reasoning_tokens == counted
    with sdk.responses.stream(**fields) as stream:
        kinds = distinct([event.type for event in stream if event.type.endswith(".delta")])
        final = stream.get_final_response()
    assert kinds == ["response.reasoning_text.delta", "response.output_text.delta"]
    assert normalized(final.to_dict()) == normalized(response.to_dict())
    # The output sent back as input (the reasoning item too) is taken as it is.
    again = sdk.responses.create(model="scripted", input=[{"role": "user", "content": "Hi"}, *response.output,
                                                          {"role": "user", "content": "More?"}])
    assert again.output_text == "Hello world"


def test_sdk_errors(sdk, gateway):
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="scripted", input="Hi", extra_body={"foo": 1})
    assert info.value.status_code == 400 and (info.value.param, info.value.code) == ("foo", "unknown_parameter")
    with pytest.raises(openai.NotFoundError) as info:
        sdk.responses.create(model="gpt-5", input="Hi")
    assert info.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="scripted", input="Hi", previous_response_id="resp_1")
    assert info.value.param == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as info:
        sdk.responses.create(model="scripted", input="Hi", tools=[{"type": "web_search"}])
    assert info.value.param == "tools[0].type" and "'web_search' tools are not supported" in info.value.message
    failed = list(sdk.responses.create(model="scripted", stream=True,
                                       input=script(error_after=1, error_message="boom")))
    assert failed[0].type == "response.created" and failed[-1].type == "error" and "boom" in failed[-1].message
    assert failed[-1].sequence_number == len(failed) - 1
    with openai.OpenAI(base_url=f"{gateway}/v1", api_key="wrong", max_retries=0) as stranger:
        with pytest.raises(openai.AuthenticationError):
            stranger.responses.create(model="scripted", input="Hi")
    with requests.post(gateway + "/v1/responses", json=request(stream=True), stream=True, timeout=30,
                       headers={"authorization": f"Bearer {API_KEY}"}) as r:
        lines = r.text.splitlines()
    assert lines[0] == "event: response.created" and lines[1].startswith('data: {"type":"response.created"')
    assert lines[-3] == "event: response.completed" and lines[-1] == "" and "data: [DONE]" not in lines


def test_closing_an_sdk_stream_cancels_the_request(sdk, triton):
    long = script(repeat={"text": "x", "count": 400}, interval_ms=20)
    with sdk.responses.stream(model="scripted", input=long, max_output_tokens=1024) as stream:
        for event in stream:
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_text.delta":
                break
    assert wait_for(triton.log_path, f"{response_id}: The request was cancelled by the client")


# ---- the real engine, against vLLM's own /v1/responses ------------------------------------

CASES = {
    "instructions and a string": {"instructions": "Be brief.", "input": "Hi there!"},
    "multi-turn items": {"input": [
        {"role": "user", "content": "Name a river."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The Nile."}]},
        {"role": "user", "content": "And a mountain?"}]},
    "text parts": {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Part one."},
                                                          {"type": "input_text", "text": "Part two."}]}]},
    "developer message": {"input": [{"role": "developer", "content": "Answer in French."},
                                    {"role": "user", "content": "Hello"}]},
    "max output tokens": {"input": "Count to ten.", "max_output_tokens": 5},
    "reasoning effort none": {"input": "Hi", "reasoning": {"effort": "none"}},
    "tools, none chosen": {"input": "Weather in Oslo?", "tools": TOOLS, "tool_choice": "none"},
    "tool history": {"tools": TOOLS, "tool_choice": "none", "input": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"}]},
}


# vLLM's /v1/responses tokenizes the rendered prompt with the tokenizer's special tokens added (its
# Responses request has no `add_special_tokens`; its chat request's default is false), so a template
# that writes the BOS itself, as the tiny model's (and Llama's) does, gets a second one. This server
# sends one (as vLLM's chat does). To compare the rest on the same prompt, vLLM's template is asked to
# write no BOS of its own (`bos_token` is a template variable); test_vllms_responses_doubles_the_bos
# shows the difference itself.
ONE_BOS = {"chat_template_kwargs": {"bos_token": ""}}


def vllm_responses(url: str, body: dict) -> dict:
    response = requests.post(f"{url}/v1/responses", json={**body, "model": "tiny-chat"}, timeout=120)
    response.raise_for_status()
    return response.json()


def same(ours: dict, theirs: dict) -> None:
    assert Response.model_validate(ours).output_text == Response.model_validate(theirs).output_text
    assert (ours["status"], ours["incomplete_details"]) == (theirs["status"], theirs["incomplete_details"])
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        assert ours["usage"][key] == theirs["usage"][key], key
    assert ours["usage"]["output_tokens_details"]["reasoning_tokens"] == 0


@pytest.mark.models("openai_responses")
@pytest.mark.parametrize("case", list(CASES))
def test_same_response_as_vllms_server(vllm_server, triton, case):
    body = {"max_output_tokens": 24, "temperature": 0, **CASES[case]}
    theirs = vllm_responses(vllm_server, {**body, **ONE_BOS})
    _, ours = ChatClient(triton.http_url, "openai_responses").create({**body, "model": "tiny-chat"})
    same(ours, theirs)


@pytest.mark.models("openai_responses", "openai_chat")
def test_vllms_responses_doubles_the_bos(vllm_server, triton):
    """The one difference in the prompt: vLLM's /v1/responses counts one token more than its own chat
    endpoint and this server, for the same conversation (a second BOS)."""
    body = {"max_output_tokens": 4, "temperature": 0, "instructions": "Be brief.", "input": "Hi there!"}
    theirs = vllm_responses(vllm_server, body)
    _, ours = ChatClient(triton.http_url, "openai_responses").create({**body, "model": "tiny-chat"})
    chat = requests.post(f"{vllm_server}/v1/chat/completions", timeout=120, json={
        "model": "tiny-chat", "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there!"}]}).json()
    assert theirs["usage"]["input_tokens"] == ours["usage"]["input_tokens"] + 1
    assert ours["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"] == vllm_responses(
        vllm_server, {**body, **ONE_BOS})["usage"]["input_tokens"]


@pytest.mark.models("openai_responses")
def test_same_stream_as_vllms_server(vllm_server, triton):
    body = {"max_output_tokens": 24, "temperature": 0, "stream": True, **CASES["instructions and a string"]}
    with requests.post(f"{vllm_server}/v1/responses", json={**body, **ONE_BOS, "model": "tiny-chat"}, stream=True,
                       timeout=120) as r:
        theirs = [json.loads(line[6:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data: ")]
    ours = ChatClient(triton.http_url, "openai_responses").stream({**body, "model": "tiny-chat"}).chunks
    final = folded(ours)
    def delta_text(events: list[dict]) -> str:
        return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")

    assert delta_text(ours) == delta_text(theirs)
    assert theirs[-1]["type"] == "response.completed"  # vLLM's, also when incomplete
    assert ours[-1]["type"] == f"response.{theirs[-1]['response']['status']}"
    same(final, theirs[-1]["response"])
    _, whole = ChatClient(triton.http_url, "openai_responses").create({**body, "stream": False, "model": "tiny-chat"})
    assert normalized(whole) == normalized(final)
