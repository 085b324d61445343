"""The vLLM backend's tensor interface as `openai_chat` writes and reads it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tritonchat.errors import BadRequestError
from tritonchat.formats import GenerationRequest, VllmFormat


def test_inputs_match_the_vllm_backend_interface():
    fmt = VllmFormat()
    request = GenerationRequest(prompt="héllo", prompt_tokens=3, max_tokens=9, stream=True, sampling={"temperature": 0.0})
    inputs = fmt.inputs(request)
    assert inputs["text_input"].dtype == np.object_ and inputs["text_input"].shape == (1,)
    assert inputs["text_input"][0].decode() == "héllo"
    for name in ("stream", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens",
                 "return_num_output_tokens"):
        assert inputs[name].dtype == np.bool_ and inputs[name].shape == (1,) and inputs[name][0]
    assert json.loads(inputs["sampling_parameters"][0]) == {"max_tokens": 9, "temperature": 0.0}
    assert fmt.requested_outputs(request) == ["text_output", "finish_reason", "num_input_tokens", "num_output_tokens"]


def test_lora_name_travels_in_sampling_parameters():
    request = GenerationRequest(prompt="p", prompt_tokens=1, max_tokens=1, stream=False, lora_name="sql")
    assert json.loads(VllmFormat().inputs(request)["sampling_parameters"][0])["lora_name"] == "sql"
    assert not VllmFormat().inputs(request)["stream"][0]


def test_parse_outputs():
    out = VllmFormat().parse({
        "text_output": np.array(["wörld".encode()], dtype=np.object_),
        "finish_reason": np.array([b"None"], dtype=np.object_),
        "num_input_tokens": np.asarray(12, dtype=np.uint32),  # 0-d, as the backend sends it
        "num_output_tokens": np.array([2], dtype=np.uint32),
    })
    assert (out.text, out.finish_reason, out.prompt_tokens, out.completion_tokens) == ("wörld", None, 12, 2)
    assert VllmFormat().parse({"finish_reason": np.array([b"length"], dtype=np.object_)}).finish_reason == "length"
    assert VllmFormat().parse({}).text == ""


def test_logit_bias_is_refused():
    """vllm_backend builds SamplingParams without vLLM's conversion of JSON's string keys."""
    request = GenerationRequest(prompt="x", prompt_tokens=1, max_tokens=2, stream=True, sampling={"logit_bias": {5: -1.0}})
    with pytest.raises(BadRequestError) as info:
        VllmFormat().check(request)
    assert info.value.param == "logit_bias"


def test_a_whole_answer_is_asked_as_a_stream_with_stream_whole():
    """`vllm_stream_whole`: the backend is asked for a stream also when the client wants one answer."""
    from dataclasses import replace  # noqa: PLC0415

    from tritonchat.formats import FormatOptions, GenerationRequest, VllmFormat  # noqa: PLC0415

    whole = GenerationRequest(prompt="p", prompt_tokens=1, max_tokens=4, stream=False)
    assert not VllmFormat(FormatOptions()).inputs(whole)["stream"][0]
    assert VllmFormat(FormatOptions(stream_whole=True)).inputs(whole)["stream"][0]
    assert VllmFormat(FormatOptions(stream_whole=True)).inputs(replace(whole, stream=True))["stream"][0]
