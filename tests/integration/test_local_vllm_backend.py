"""The local `vllm` backend (harness/local_vllm_backend/model.py) against Triton's vLLM interface.

Two models of the session's server on the tiny model in the real vLLM engine (CPU), both with a
config.pbtxt of only `backend: "vllm"` and an instance group, so the backend's auto-complete
declares the whole interface:
- `vllm_plain`: LoRA off (unloaded after this module);
- `vllm_model`: `"enable_lora": true` and `1/multi_lora.json` naming one random LoRA adapter.

Talks to them through HTTP `generate` / `generate_stream` and tritonclient gRPC streaming. That
the server stops cleanly with them (and the chat models) loaded is checked when the session's
server stops (tests/integration/conftest.py).
"""

from __future__ import annotations

import json
import queue
import re
import time
from pathlib import Path

import numpy as np
import pytest
import requests

from harness.server import TritonServer

pytestmark = [pytest.mark.integration, pytest.mark.models("vllm_plain", "vllm_model")]

MODEL = "vllm_plain"  # the tiny model, LoRA off
LORA_MODEL = "vllm_model"  # the tiny model with one adapter, LORA_NAME (the session's vllm_model)
LORA_NAME = "tiny-lora"
PROMPT = "The river flows"
# Long enough to still be running when the test cancels it (about 2 ms a token here).
LONG_GENERATION = {"max_tokens": 1900, "ignore_eos": True}


# ---------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(triton) -> TritonServer:
    """The session's server, with the two vLLM models loaded; the one without LoRA is unloaded
    after this module (its engine is not needed by any other)."""
    yield triton
    triton.unload(MODEL)


# ---------------------------------------------------------------------------------------
# Clients
# ---------------------------------------------------------------------------------------


def generate(server: TritonServer, body: dict, model: str = MODEL) -> tuple[int, dict]:
    r = requests.post(f"http://{server.http_url}/v2/models/{model}/generate", json=body, timeout=120)
    return r.status_code, r.json()


def generate_stream(server: TritonServer, body: dict, model: str = MODEL) -> list[dict]:
    """Every `data:` event of one `generate_stream` call."""
    with requests.post(
        f"http://{server.http_url}/v2/models/{model}/generate_stream", json=body, stream=True, timeout=120
    ) as r:
        return [json.loads(line[len(b"data: ") :]) for line in r.iter_lines() if line.startswith(b"data: ")]


def greedy(max_tokens: int, **extra) -> dict:
    return {"temperature": 0, "max_tokens": max_tokens, **extra}


class GrpcStream:
    """One tritonclient gRPC stream; responses land in a queue."""

    def __init__(self, server: TritonServer, grpc_error_status: bool = False):
        import tritonclient.grpc as grpcclient

        self.grpcclient = grpcclient
        self.results: queue.Queue = queue.Queue()
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        # With this header Triton ends the stream with the error's own gRPC status code.
        headers = {"triton_grpc_error": "true"} if grpc_error_status else None
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)), headers=headers)

    def send(self, prompt: str, sampling: dict, model: str = MODEL, **flags: bool) -> None:
        inputs = [
            self._tensor("text_input", np.array([prompt.encode()], dtype=np.object_), "BYTES"),
            self._tensor("sampling_parameters", np.array([json.dumps(sampling).encode()], dtype=np.object_), "BYTES"),
        ]
        for name, value in flags.items():
            inputs.append(self._tensor(name, np.array([value], dtype=bool), "BOOL"))
        self.client.async_stream_infer(model, inputs, enable_empty_final_response=True)

    def _tensor(self, name, array, dtype):
        tensor = self.grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        return tensor

    def next(self, timeout: float = 60):
        return self.results.get(timeout=timeout)

    def collect(self, timeout: float = 60) -> list:
        """Results until the final response; raises the first error."""
        results = []
        while True:
            result, error = self.next(timeout)
            if error is not None:
                raise error
            results.append(result)
            if result.get_response().parameters["triton_final_response"].bool_param:
                return results

    def close(self, cancel: bool = False) -> None:
        # An idle stream left open keeps Triton 2.51 from unloading models at shutdown.
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def wait_for_log(server: TritonServer, pattern: str, count: int, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    found = 0
    while time.monotonic() < deadline:
        found = len(re.findall(pattern, Path(server.log_path).read_text(errors="replace")))
        if found >= count:
            return found
        time.sleep(0.2)
    return found


def count_in_log(server: TritonServer, pattern: str) -> int:
    return len(re.findall(pattern, Path(server.log_path).read_text(errors="replace")))


# ---------------------------------------------------------------------------------------
# Text, counts, logprobs
# ---------------------------------------------------------------------------------------


def test_auto_complete_declares_the_vllm_interface(server):
    metadata = requests.get(f"http://{server.http_url}/v2/models/{MODEL}", timeout=10).json()
    inputs = {t["name"]: (t["datatype"], t["shape"]) for t in metadata["inputs"]}
    outputs = {t["name"]: (t["datatype"], t["shape"]) for t in metadata["outputs"]}
    assert inputs == {
        "text_input": ("BYTES", [1]),
        "image": ("BYTES", [-1]),  # base64 image files for multimodal models
        "stream": ("BOOL", [1]),
        "sampling_parameters": ("BYTES", [1]),
        "exclude_input_in_output": ("BOOL", [1]),
        "return_finish_reason": ("BOOL", [1]),
        "return_cumulative_logprob": ("BOOL", [1]),
        "return_logprobs": ("BOOL", [1]),
        "return_num_input_tokens": ("BOOL", [1]),
        "return_num_output_tokens": ("BOOL", [1]),
        "embedding_request": ("BYTES", [1]),  # from 25.11: tells that release's interface apart
    }
    assert outputs == {
        "text_output": ("BYTES", [-1]),
        "finish_reason": ("BYTES", [-1]),
        "cumulative_logprob": ("FP32", [-1]),
        "logprobs": ("BYTES", [-1]),
        "num_input_tokens": ("UINT32", [1]),
        "num_output_tokens": ("UINT32", [-1]),
    }
    config = requests.get(f"http://{server.http_url}/v2/models/{MODEL}/config", timeout=10).json()
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert config["max_batch_size"] == 0


def test_stream_deltas_join_to_the_non_stream_text(server):
    sampling = json.dumps(greedy(32))
    status, whole = generate(
        server, {"text_input": PROMPT, "sampling_parameters": sampling, "exclude_input_in_output": True}
    )
    assert status == 200, whole
    events = generate_stream(
        server,
        {"text_input": PROMPT, "sampling_parameters": sampling, "stream": True, "return_finish_reason": True},
    )
    assert len(events) > 1 and all("error" not in e for e in events), events
    assert "".join(e["text_output"] for e in events) == whole["text_output"]
    assert whole["text_output"] and not whole["text_output"].startswith(PROMPT)
    # finish_reason is the string "None" until the last response.
    assert [e["finish_reason"] for e in events[:-1]] == ["None"] * (len(events) - 1)
    assert events[-1]["finish_reason"] in ("length", "stop")


def test_non_stream_output_includes_the_prompt_by_default(server):
    body = {"text_input": PROMPT, "parameters": greedy(12)}
    status, with_prompt = generate(server, body)
    assert status == 200, with_prompt
    status, without = generate(server, {**body, "exclude_input_in_output": True})
    assert status == 200, without
    assert with_prompt["text_output"] == PROMPT + without["text_output"]
    # Explicit exclude_input_in_output=false means the same as absent for non-streaming.
    status, explicit = generate(server, {**body, "exclude_input_in_output": False})
    assert explicit["text_output"] == with_prompt["text_output"]


def test_max_tokens_ends_with_length_and_streamed_token_counts_add_up(server):
    max_tokens = 10
    sampling = json.dumps({**greedy(max_tokens), "ignore_eos": True})
    flags = {"return_finish_reason": True, "return_num_output_tokens": True}
    events = generate_stream(server, {"text_input": PROMPT, "sampling_parameters": sampling, "stream": True, **flags})
    assert all("error" not in e for e in events), events
    assert events[-1]["finish_reason"] == "length"
    assert sum(e["num_output_tokens"] for e in events) == max_tokens
    assert all(e["num_output_tokens"] >= 1 for e in events)  # a delta per response, never cumulative
    status, whole = generate(server, {"text_input": PROMPT, "sampling_parameters": sampling, **flags})
    assert status == 200 and whole["finish_reason"] == "length" and whole["num_output_tokens"] == max_tokens


def test_default_max_tokens_is_vllms_16(server):
    status, body = generate(
        server,
        {"text_input": PROMPT, "parameters": {"ignore_eos": True}, "return_num_output_tokens": True},
    )
    assert status == 200 and body["num_output_tokens"] == 16


def test_num_input_tokens_counts_the_prompt_as_the_engine_tokenizes_it(server, tiny_model):
    from transformers import AutoTokenizer

    # vLLM tokenizes with add_special_tokens=True, so the BOS token counts.
    expected = len(AutoTokenizer.from_pretrained(tiny_model)(PROMPT).input_ids)
    status, body = generate(server, {"text_input": PROMPT, "parameters": greedy(4), "return_num_input_tokens": True})
    assert status == 200 and body["num_input_tokens"] == expected
    events = generate_stream(
        server,
        {"text_input": PROMPT, "parameters": greedy(4), "stream": True, "return_num_input_tokens": True},
    )
    assert events and all(e["num_input_tokens"] == expected for e in events)


def test_grpc_stream_tensor_shapes_and_flags(server):
    stream = GrpcStream(server)
    try:
        stream.send(
            PROMPT,
            greedy(6, ignore_eos=True),
            stream=True,
            return_num_input_tokens=True,
            return_num_output_tokens=True,
            return_finish_reason=True,
            return_cumulative_logprob=True,
        )
        results = stream.collect()
    finally:
        stream.close()
    # FINAL rides on the last data response (no separate empty response).
    assert all(r.get_response().outputs for r in results)
    finals = [r.get_response().parameters["triton_final_response"].bool_param for r in results]
    assert finals == [False] * (len(results) - 1) + [True]
    for result in results:
        assert result.as_numpy("num_input_tokens").shape == ()  # a 0-d array, as vLLM's backend sends
        assert result.as_numpy("num_input_tokens").dtype == np.uint32
        assert result.as_numpy("text_output").shape == (1,)
        assert result.as_numpy("num_output_tokens").shape == (1,)
        assert result.as_numpy("cumulative_logprob").dtype == np.float32
    assert sum(int(r.as_numpy("num_output_tokens")[0]) for r in results) == 6
    assert results[-1].as_numpy("finish_reason")[0] == b"length"
    # No logprobs were asked for in the sampling parameters: vLLM reports none.
    assert np.isnan(results[-1].as_numpy("cumulative_logprob")[0])


def check_logprob_positions(positions: list, top: int) -> None:
    for position in positions:
        assert 1 <= len(position) <= top + 1  # the top tokens plus the sampled one
        for token_id, entry in position.items():
            assert token_id.isdigit()
            assert set(entry) == {"logprob", "rank", "decoded_token"}
            assert isinstance(entry["logprob"], float) and entry["logprob"] <= 0
            assert isinstance(entry["rank"], int) and entry["rank"] >= 1
            assert isinstance(entry["decoded_token"], str)


def test_logprobs_output(server):
    max_tokens, top = 8, 2
    sampling = json.dumps({**greedy(max_tokens), "logprobs": top, "ignore_eos": True})
    flags = {"return_logprobs": True, "return_num_output_tokens": True, "return_cumulative_logprob": True}

    status, whole = generate(server, {"text_input": PROMPT, "sampling_parameters": sampling, **flags})
    assert status == 200, whole
    positions = json.loads(whole["logprobs"])
    assert len(positions) == max_tokens
    check_logprob_positions(positions, top)
    # Greedy: every sampled token is the rank-1 token, so the cumulative logprob is their sum.
    best = [min(p.values(), key=lambda e: e["rank"]) for p in positions]
    assert all(e["rank"] == 1 for e in best)
    assert whole["cumulative_logprob"] == pytest.approx(sum(e["logprob"] for e in best), rel=1e-4)

    events = generate_stream(server, {"text_input": PROMPT, "sampling_parameters": sampling, "stream": True, **flags})
    streamed = []
    for event in events:
        delta = json.loads(event["logprobs"])
        assert len(delta) == event["num_output_tokens"]  # only the new positions
        streamed.extend(delta)
    assert streamed == positions

    # Not asked for in the sampling parameters: the literal string "null".
    status, plain = generate(server, {"text_input": PROMPT, "parameters": greedy(3), "return_logprobs": True})
    assert status == 200 and plain["logprobs"] == "null"


def test_structured_outputs_follow_a_json_schema(server):
    from jsonschema import validate

    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "sunny": {"type": "boolean"},
            "level": {"type": "string", "enum": ["low", "high"]},
        },
        "required": ["city", "sunny", "level"],
        "additionalProperties": False,
    }
    structured = json.dumps({"json": schema, "disable_any_whitespace": True})
    sampling = json.dumps({"temperature": "0", "max_tokens": "200", "structured_outputs": structured})
    body = {"text_input": PROMPT, "sampling_parameters": sampling, "exclude_input_in_output": True}
    status, body = generate(server, {**body, "return_finish_reason": True})
    assert status == 200, body
    assert body["finish_reason"] == "stop", body
    validate(json.loads(body["text_output"]), schema)


def test_string_values_are_cast_like_the_real_backend(server):
    # Annotated int/float/bool fields accept strings; "0" temperature is greedy.
    sampling = json.dumps({"temperature": "0", "max_tokens": "5", "ignore_eos": "true"})
    status, a = generate(
        server, {"text_input": PROMPT, "sampling_parameters": sampling, "return_num_output_tokens": True}
    )
    assert status == 200 and a["num_output_tokens"] == 5
    status, b = generate(server, {"text_input": PROMPT, "parameters": greedy(5, ignore_eos=True)})
    assert a["text_output"] == b["text_output"]


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


# What the real backend answers for any value vLLM refuses to build SamplingParams from (its
# TritonSamplingParams.from_dict logs the cause and returns None, then `lora_name` is read from it).
NO_SAMPLING_PARAMS = "Error generating stream: 'NoneType' object has no attribute 'lora_name'"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"parameters": {"no_such_parameter": 1}}, NO_SAMPLING_PARAMS),
        ({"parameters": {"max_tokens": "many"}}, NO_SAMPLING_PARAMS),
        ({"sampling_parameters": json.dumps({"structured_outputs": json.dumps({"json": 1, "regex": "a"})})},
         NO_SAMPLING_PARAMS),
        ({"sampling_parameters": json.dumps({"temperature": -3})}, NO_SAMPLING_PARAMS),
        # vllm_backend passes logit_bias unconverted: JSON keys stay strings, which the engine
        # (not SamplingParams) trips over, without a message of its own
        ({"sampling_parameters": json.dumps({"logit_bias": {"5": -100}})}, None),
    ],
    ids=["unknown-key", "bad-int", "bad-structured-outputs", "invalid-value", "logit-bias-string-keys"],
)
def test_bad_sampling_parameters_fail_the_request(server, body, message):
    status, reply = generate(server, {"text_input": PROMPT, **body})
    assert status != 200
    assert reply["error"].startswith("Error generating stream: "), reply
    assert message is None or reply["error"] == message, reply
    events = generate_stream(server, {"text_input": PROMPT, "stream": True, **body})
    assert len(events) == 1 and events[0]["error"].startswith("Error generating stream: "), events
    assert message is None or events[0]["error"] == message, events


def test_streaming_with_exclude_input_in_output_false_is_an_error(server):
    events = generate_stream(server, {"text_input": PROMPT, "stream": True, "exclude_input_in_output": False})
    assert events == [
        {"error": "Error generating stream: When streaming, `exclude_input_in_output` = False is not allowed."}
    ]


@pytest.mark.parametrize(
    ("sampling", "model", "message"),
    [
        ({"max_tokens": 2, "no_such_parameter": True}, MODEL, "Error generating stream: "),
        ({"lora_name": "other"}, LORA_MODEL, "LoRA other is not supported"),
    ],
    ids=["generation-error", "lora-error"],
)
def test_grpc_errors_are_internal_with_the_message(server, sampling, model, message):
    stream = GrpcStream(server, grpc_error_status=True)
    try:
        stream.send(PROMPT, sampling, model=model, stream=True)
        result, error = stream.next()
    finally:
        stream.close()
    assert result is None
    assert error.status() == "StatusCode.INTERNAL"
    assert error.message().startswith(message), error.message()


def test_grpc_non_stream_sends_one_final_response(server):
    stream = GrpcStream(server)
    try:
        stream.send(PROMPT, greedy(6), stream=False, exclude_input_in_output=True)
        results = stream.collect()
        with pytest.raises(queue.Empty):
            stream.next(timeout=1)
    finally:
        stream.close()
    assert len(results) == 1 and results[0].get_response().outputs
    assert results[0].as_numpy("text_output")[0].decode()


def test_lora_name_without_lora_enabled(server):
    status, reply = generate(server, {"text_input": PROMPT, "parameters": {"lora_name": LORA_NAME}})
    assert status != 200 and reply["error"] == "LoRA feature is not enabled."


def test_unknown_lora_name(server):
    status, reply = generate(server, {"text_input": PROMPT, "parameters": {"lora_name": "other"}}, model=LORA_MODEL)
    assert status != 200
    assert reply["error"] == f"LoRA other is not supported, we currently support ['{LORA_NAME}']"


def test_known_lora_changes_the_output(server):
    base_body = {"text_input": PROMPT, "exclude_input_in_output": True}
    status, base = generate(server, {**base_body, "parameters": greedy(12, ignore_eos=True)}, model=LORA_MODEL)
    assert status == 200, base
    status, adapted = generate(
        server, {**base_body, "parameters": greedy(12, ignore_eos=True, lora_name=LORA_NAME)}, model=LORA_MODEL
    )
    assert status == 200, adapted
    assert adapted["text_output"] != base["text_output"]


# ---------------------------------------------------------------------------------------
# Cancellation and shutdown
# ---------------------------------------------------------------------------------------

CANCELLED = r"\[vllm\] Successfully cancelled the request"


def cancel_mid_generation(server: TritonServer, stream: bool, attempts: int = 4) -> None:
    """Start a long generation over gRPC, cancel it, and expect the backend to abort it in vLLM.

    The backend only aborts a request that is still generating. On two busy cores the engine
    can finish all its tokens before the backend has sent the first few (the stream then
    arrives in one burst), so a run without an abort is repeated a few times.
    """
    for _ in range(attempts):
        before = count_in_log(server, CANCELLED)
        grpc = GrpcStream(server)
        grpc.send(PROMPT, LONG_GENERATION, stream=stream)
        if stream:
            for _ in range(3):  # mid-stream
                result, error = grpc.next()
                assert error is None, error
        else:
            time.sleep(0.3)  # generating; non-streaming sends nothing until the end
        grpc.close(cancel=True)
        # Streaming: noticed after the backend's next send; non-streaming: at the next engine output.
        if wait_for_log(server, CANCELLED, before + 1, timeout=10) > before:
            return
    pytest.fail(f"no engine abort after {attempts} cancelled requests")


def test_grpc_stream_cancellation_aborts_the_engine_request(server):
    cancel_mid_generation(server, stream=True)
    # ...and the model keeps serving.
    grpc = GrpcStream(server)
    try:
        grpc.send(PROMPT, greedy(5, ignore_eos=True), stream=True, return_num_output_tokens=True)
        results = grpc.collect(timeout=30)
    finally:
        grpc.close()
    assert sum(int(r.as_numpy("num_output_tokens")[0]) for r in results) == 5


def test_grpc_non_stream_cancellation_aborts_the_engine_request(server):
    cancel_mid_generation(server, stream=False)
    status, body = generate(server, {"text_input": PROMPT, "parameters": greedy(3)})
    assert status == 200 and body["text_output"].startswith(PROMPT)
