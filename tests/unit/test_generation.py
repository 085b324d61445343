"""Completion budget, context-length errors and sampling settings."""

from __future__ import annotations

import json

import pytest

from tritonchat.errors import BadRequestError
from tritonchat.generation import Limits, max_tokens_for, plan_generation, refuse_unsupported, sampling_for
from tritonchat.protocol import parse_chat_request
from tritonchat.template import Prompt


def request(**fields):
    return parse_chat_request(json.dumps({"messages": [{"role": "user", "content": "hi"}], **fields}))


PROMPT = Prompt(text="p", num_tokens=100)


def test_default_budget_is_what_fits():
    assert max_tokens_for(request(), PROMPT, Limits(context_length=1000)) == 900


def test_configured_default_is_capped_by_the_context():
    assert max_tokens_for(request(), PROMPT, Limits(context_length=1000, default_max_tokens=50)) == 50
    assert max_tokens_for(request(), PROMPT, Limits(context_length=120, default_max_tokens=50)) == 20


def test_requested_budget():
    assert max_tokens_for(request(max_completion_tokens=900), PROMPT, Limits(1000)) == 900


def test_request_over_the_context_names_both_numbers():
    with pytest.raises(BadRequestError) as info:
        max_tokens_for(request(max_tokens=901), PROMPT, Limits(1000))
    assert "1000" in info.value.message and "1001" in info.value.message and "100" in info.value.message
    assert info.value.param == "max_tokens" and info.value.code == "context_length_exceeded"


def test_prompt_alone_over_the_context():
    with pytest.raises(BadRequestError) as info:
        max_tokens_for(request(), Prompt("p", 1000), Limits(1000))
    assert info.value.param == "messages"


def test_unknown_context_needs_a_budget():
    assert max_tokens_for(request(max_tokens=7), PROMPT, Limits(0)) == 7
    with pytest.raises(BadRequestError):
        max_tokens_for(request(), PROMPT, Limits(0))


def test_sampling_settings_use_vllm_names():
    sampling = sampling_for(
        request(temperature=0.2, top_p=0.5, top_k=3, seed=1, stop="x", frequency_penalty=1.0, logit_bias={"12": -100},
                ignore_eos=True, min_tokens=2, stop_token_ids=[5])
    )
    assert sampling == {
        "temperature": 0.2, "top_p": 0.5, "top_k": 3, "seed": 1, "stop": ["x"], "frequency_penalty": 1.0,
        "logit_bias": {12: -100.0}, "ignore_eos": True, "min_tokens": 2, "stop_token_ids": [5],
    }
    assert sampling_for(request()) == {}


def test_plan():
    plan = plan_generation(request(stream=True, max_tokens=3), PROMPT, Limits(1000))
    assert (plan.prompt, plan.prompt_tokens, plan.max_tokens, plan.stream) == ("p", 100, 3, True)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 3}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"chat_template": "{{ messages }}"}, "chat_template"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stream": True, "stream_options": {"continuous_usage_stats": True}}, "stream_options"),
    ],
)
def test_unsupported_is_refused(fields, param):
    with pytest.raises(BadRequestError) as info:
        refuse_unsupported(request(**fields))
    assert info.value.param == param


def test_supported_passes():
    refuse_unsupported(request(n=1, tool_choice="none", stream=True, stream_options={"include_usage": True},
                               response_format={"type": "text"}))
