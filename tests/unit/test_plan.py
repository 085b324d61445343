"""Completion budget, context-length errors, sampling settings and one generation per choice."""

from __future__ import annotations

import json

import pytest

from tritonchat.errors import BadRequestError, NotFoundError
from tritonchat.plan import Limits, ModelNames, max_tokens_for, plan_generations, requested_generation, sampling_for
from tritonchat.protocol import parse_chat_request, parse_completion_request
from tritonchat.template import Prompt


def request(**fields):
    return parse_chat_request(json.dumps({"messages": [{"role": "user", "content": "hi"}], **fields}))


PROMPT = Prompt(text="p", num_tokens=100)


def plan(req, limits=Limits(1000)):
    return plan_generations(requested_generation(req), req, PROMPT, limits)


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
    [planned] = plan(request(stream=True, max_tokens=3))
    assert (planned.prompt, planned.prompt_tokens, planned.max_tokens, planned.stream) == ("p", 100, 3, True)
    assert planned.logprobs is None and planned.structured is None and planned.lora_name is None


def test_n_choices_get_distinct_seeds():
    plans = plan(request(n=3, seed=41, max_tokens=5))
    assert [p.sampling["seed"] for p in plans] == [41, 42, 43]
    assert len({id(p.sampling) for p in plans}) == 3
    unseeded = plan(request(n=2, max_tokens=5))
    assert all("seed" not in p.sampling for p in unseeded)
    top = plan(request(n=2, seed=2**63 - 1, max_tokens=5))
    assert top[1].sampling["seed"] == -(2**63)


def test_logprobs_and_structured_output_plans():
    [planned] = plan(request(logprobs=True, top_logprobs=3, max_tokens=5))
    assert planned.logprobs == 3
    [planned] = plan(request(logprobs=True, max_tokens=5))
    assert planned.logprobs == 0
    [planned] = plan(request(response_format={"type": "json_object"}, max_tokens=5))
    assert planned.structured == {"json_object": True}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    [planned] = plan(request(response_format=fmt, max_tokens=5))
    assert planned.structured == {"json": schema}


def test_model_names_and_lora_adapters():
    names = ModelNames("llama", ":", ("sql", "chat"))
    assert names.resolve(None) is None and names.resolve("") is None and names.resolve("llama") is None
    assert names.resolve("llama:sql") == "sql"
    with pytest.raises(NotFoundError, match="'poetry'"):
        names.resolve("llama:poetry")
    with pytest.raises(NotFoundError) as info:
        names.resolve("gpt-4o")
    assert info.value.code == "model_not_found"
    with pytest.raises(NotFoundError):
        ModelNames("llama").resolve("llama:sql")


def test_completion_budget_and_context():
    completion = parse_completion_request(json.dumps({"prompt": "x"}))
    assert max_tokens_for(completion, PROMPT, Limits(1000)) == 900
    with pytest.raises(BadRequestError) as info:
        max_tokens_for(completion, Prompt("p", 1000), Limits(1000))
    assert info.value.param == "prompt"
