"""Learning the target's interface: input names by TensorRT-LLM release, optional features,
and 400s naming what the target's release lacks."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tritonchat.errors import BadRequestError, InternalError
from tritonchat.formats import EnsembleFormat, FormatOptions, GenerationRequest, TensorRtLlmFormat, VllmFormat
from tritonchat.target import TargetInterface, adapt_options, fetch_interface

# The ensemble of a release before the renames and the token-count / guided-decoding inputs.
OLD = TargetInterface(frozenset({"text_input", "max_tokens", "stream", "random_seed", "min_length", "top_p",
                                 "stop_words", "end_id"}), frozenset({"text_output"}))
NEW = TargetInterface(frozenset({"text_input", "max_tokens", "stream", "seed", "min_tokens", "top_p", "stop_words",
                                 "exclude_input_in_output", "return_num_input_tokens", "return_num_output_tokens",
                                 "guided_decoding_guide_type", "guided_decoding_guide", "lora_task_id"}),
                      frozenset({"text_output", "num_input_tokens", "num_output_tokens"}))


def request(**kw) -> GenerationRequest:
    return GenerationRequest(**{"prompt": "Hello", "prompt_tokens": 2, "max_tokens": 8, "stream": True, **kw})


def test_names_and_features_follow_the_release():
    old = adapt_options(FormatOptions(), OLD)
    assert (old.seed_input, old.min_tokens_input, old.token_count_outputs) == ("random_seed", "min_length", False)
    new = adapt_options(FormatOptions(), NEW)
    assert (new.seed_input, new.min_tokens_input, new.token_count_outputs) == ("seed", "min_tokens", True)
    forced = adapt_options(FormatOptions(), OLD, seed_input="my_seed", token_counts="true")
    assert forced.seed_input == "my_seed" and forced.token_count_outputs is True


def test_an_old_ensemble_gets_its_own_names_and_nothing_it_lacks():
    fmt = EnsembleFormat(adapt_options(FormatOptions(), OLD))
    inputs = fmt.inputs(request(sampling={"seed": 3, "min_tokens": 2, "stop": ["x"]}))
    assert inputs["random_seed"][0, 0] == 3 and inputs["min_length"][0, 0] == 2
    assert not {"seed", "min_tokens", "exclude_input_in_output", "return_num_input_tokens"} & set(inputs)
    assert fmt.requested_outputs(request()) == ["text_output"]


@pytest.mark.parametrize(("fields", "param"), [
    ({"structured": {"json": {"type": "object"}}}, "response_format"),
    ({"sampling": {"stop": ["x"]}}, "stop"),
    ({"sampling": {"seed": 1}}, "seed"),
    ({"sampling": {"min_tokens": 1}}, "min_tokens"),
])
def test_what_the_target_lacks_is_a_400_naming_the_field(fields, param, tokenizer):
    bare = TargetInterface(frozenset({"input_ids", "input_lengths", "request_output_len"}), frozenset({"output_ids"}))
    fmt = TensorRtLlmFormat(adapt_options(FormatOptions(tokenizer=tokenizer), bare))
    with pytest.raises(BadRequestError) as info:
        fmt.check(request(**fields))
    assert info.value.param == param
    fmt.check(request())
    assert "seed" not in fmt.inputs(request())  # no seed input: none drawn either


def test_unknown_interface_assumes_every_input():
    fmt = EnsembleFormat()
    fmt.check(request(sampling={"seed": 1, "stop": ["x"]}, structured={"json": {}}))
    assert "seed" in fmt.inputs(request())


def test_fetch_interface_reads_the_config_endpoint():
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append((self.path, self.headers.get("x-key")))
            body = {"/v2": {"name": "triton", "version": "2.51.0"},
                    "/v2/models/ensemble/config": {"input": [{"name": "random_seed"}], "output": [{"name": "text_output"}],
                                                     "model_transaction_policy": {"decoupled": True}},
                    }.get(self.path)
            self.send_response(200 if body else 404)
            self.end_headers()
            self.wfile.write(json.dumps(body or {"error": "no"}).encode())

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"127.0.0.1:{server.server_port}"
        interface = fetch_interface(url, "ensemble", headers={"x-key": "k"})
        assert interface == TargetInterface(frozenset({"random_seed"}), frozenset({"text_output"}), "2.51.0", True)
        assert TargetInterface.from_config({"input": [], "output": []}).decoupled is False  # Triton's default
        assert ("/v2/models/ensemble/config", "k") in seen
        with pytest.raises(Exception):  # noqa: B017
            fetch_interface(url, "missing")
    finally:
        server.shutdown()


# Triton's vLLM backend by release: 24.12 (the return_* inputs), 25.01-25.10 and 25.11 (which
# added `embedding_request`).
VLLM_2412_INPUTS = frozenset({"text_input", "stream", "sampling_parameters", "exclude_input_in_output", "image",
                              "return_finish_reason", "return_cumulative_logprob", "return_logprobs",
                              "return_num_input_tokens", "return_num_output_tokens"})
VLLM_OUTPUTS = frozenset({"text_output", "finish_reason", "num_input_tokens", "num_output_tokens"})


@pytest.mark.parametrize(("inputs", "version", "key"), [
    (VLLM_2412_INPUTS | {"embedding_request"}, "2.63.0", "structured_outputs"),
    (VLLM_2412_INPUTS | {"embedding_request"}, "2.51.0", "structured_outputs"),  # a backend newer than the server
    (VLLM_2412_INPUTS, "2.62.0", "guided_decoding"),
    (VLLM_2412_INPUTS, "2.54.0", "guided_decoding"),
    (VLLM_2412_INPUTS, "2.53.0", ""),
    (VLLM_2412_INPUTS, "2.53.0dev", ""),
    (VLLM_2412_INPUTS, "", "structured_outputs"),  # version unknown: the current release's
])
def test_the_vllm_structured_outputs_key_follows_the_release(inputs, version, key):
    options = adapt_options(FormatOptions(), TargetInterface(inputs, VLLM_OUTPUTS, version))
    assert options.structured_outputs_key == key
    assert adapt_options(FormatOptions(), TargetInterface(inputs, VLLM_OUTPUTS, version),
                         structured_outputs_key="my_key").structured_outputs_key == "my_key"


def test_a_vllm_release_without_constrained_generation_refuses_it_with_a_400():
    fmt = VllmFormat(adapt_options(FormatOptions(target_model="vllm_model"),
                                   TargetInterface(VLLM_2412_INPUTS, VLLM_OUTPUTS, "2.53.0")))
    with pytest.raises(BadRequestError) as info:
        fmt.check(request(structured={"json": {"type": "object"}}))
    assert info.value.param == "response_format"
    fmt.check(request())
    guided = VllmFormat(adapt_options(FormatOptions(), TargetInterface(VLLM_2412_INPUTS, VLLM_OUTPUTS, "2.60.0")))
    params = guided.sampling_parameters(request(structured={"json": {"type": "object"}}))
    assert json.loads(params["guided_decoding"]) == {"json": {"type": "object"}} and "structured_outputs" not in params


def test_a_vllm_backend_before_24_12_is_named_as_too_old():
    old = frozenset({"text_input", "stream", "sampling_parameters", "exclude_input_in_output"})
    fmt = VllmFormat(adapt_options(FormatOptions(target_model="vllm_model"),
                                   TargetInterface(old, frozenset({"text_output"}), "2.51.0")))
    with pytest.raises(InternalError) as info:
        fmt.check(request())
    assert "'vllm_model'" in str(info.value) and "return_num_input_tokens" in str(info.value)
    assert "24.12" in str(info.value)
