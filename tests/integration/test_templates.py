"""`openai_chat` in front of models whose chat templates differ from the tiny model's: plain
ChatML (no tool support, string content) and Mistral's (no system role, alternating roles)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import ChatClient, script

pytestmark = [pytest.mark.integration, pytest.mark.models("chat_chatml", "chat_mistral")]


def prompt_seen(client: ChatClient, messages: list[dict]) -> str:
    """The prompt the generation model received (the scripted model echoes its request)."""
    status, body = client.create({"messages": messages})
    assert status == 200, body
    return json.loads(body["choices"][0]["message"]["content"])["inputs"]["text_input"][0]


def test_tool_history_renders_with_a_template_without_tool_support(triton):
    """An assistant turn with tool_calls and `"content": null`, then a tool result: plain ChatML
    renders the null content as "" (as vLLM does) instead of failing."""
    chatml = ChatClient(triton.http_url, "chat_chatml")
    messages = [
        {"role": "user", "content": "Weather in Oslo? " + script(echo_request=True)},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "content": "12 C", "tool_call_id": "c1"},
    ]
    prompt = prompt_seen(chatml, messages)
    assert "<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n12 C<|im_end|>\n" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_mistral_template(triton):
    mistral = ChatClient(triton.http_url, "chat_mistral")
    prompt = prompt_seen(mistral, [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                   {"role": "user", "content": script(echo_request=True)}])
    assert prompt.startswith("[INST] a [/INST]b<|im_end|>[INST] SCRIPT:")


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "Conversation roles must alternate"),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "Conversation roles must alternate"),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"},
          {"role": "tool", "content": "d", "tool_call_id": "x"}],
         "Only user and assistant roles are supported"),
    ],
    ids=["system", "two-users", "tool"],
)
def test_what_a_template_refuses_is_a_400(triton, messages, fragment):
    for stream in (False, True):
        client = ChatClient(triton.http_url, "chat_mistral")
        if stream:
            result = client.stream({"messages": messages, "stream": True})
            error = result.error
        else:
            _status, error = client.create({"messages": messages})
        assert error["error"]["type"] == "invalid_request_error" and error["error"]["param"] == "messages"
        assert fragment in error["error"]["message"]
