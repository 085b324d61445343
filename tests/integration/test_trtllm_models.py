"""The TensorRT-LLM stand-ins in harness/models, checked directly over gRPC with tritonclient.

One real `tritonserver` for the module with
- `ensemble`: harness/models/trtllm_ensemble, the client interface of NVIDIA's `ensemble` /
  `tensorrt_llm_bls` (text in, text out, batch dimension on every tensor);
- `tensorrt_llm`: harness/models/tensorrt_llm_mock, the client interface of the C++
  `tensorrt_llm` model (token ids in and out);
both with `tokenizer_dir` set to the tiny model. Each test scripts the output through the
prompt (`SCRIPT:{json}`) and checks the responses as a client of the real models sees them:
per-token streamed text, the response-less FINAL of the ensemble/BLS, the FINAL flag on the
last data response of tensorrt_llm, token counts, stop words, exact input names/dtypes/shapes,
errors and cancellation.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from harness.server import TritonServer

pytestmark = [pytest.mark.integration, pytest.mark.models("ensemble", "tensorrt_llm", "ensemble_old")]

DEFAULT_TEXT = " Hello wörld 你好 🎉"  # the models' default output


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model))


@pytest.fixture(scope="module")
def server(triton) -> TritonServer:
    """The session server: it serves the stand-ins as `ensemble` and `tensorrt_llm`."""
    return triton


# ---------------------------------------------------------------------------------------
# A tritonclient gRPC streaming call, every response recorded
# ---------------------------------------------------------------------------------------

NP_TO_TRITON = {np.bool_: "BOOL", np.int32: "INT32", np.uint64: "UINT64", np.float32: "FP32",
                np.float16: "FP16", np.object_: "BYTES"}


@dataclass
class Response:
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    final: bool = False
    error: str | None = None


def call(server: TritonServer, model: str, tensors: dict[str, np.ndarray], *, request_id: str = "",
         cancel_after: int | None = None, error_grace_s: float = 0.5) -> list[Response]:
    """Stream one request; returns its responses up to the final one (or an error and what follows it)."""
    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    responses: list[Response] = []
    cancelled = False
    try:
        inputs = []
        for name, array in tensors.items():
            tensor = grpcclient.InferInput(name, list(array.shape), NP_TO_TRITON[array.dtype.type])
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        client.async_stream_infer(model, inputs, request_id=request_id, enable_empty_final_response=True)
        while True:
            try:
                result, error = results.get(timeout=error_grace_s if responses and responses[-1].error else 20)
            except queue.Empty:
                if responses and responses[-1].error:
                    return responses  # an error response that was itself the final one
                raise
            if error is not None:
                responses.append(Response(error=str(error)))
                continue
            proto = result.get_response()
            outputs = {o.name: result.as_numpy(o.name) for o in proto.outputs}
            responses.append(Response(outputs, proto.parameters["triton_final_response"].bool_param))
            if responses[-1].final:
                return responses
            if cancel_after is not None and len(responses) >= cancel_after:
                client.stop_stream(cancel_requests=True)
                cancelled = True
                return responses
    finally:
        if not cancelled:
            client.stop_stream()
        client.close()


def ensemble_inputs(prompt: str, max_tokens: int = 64, **extra) -> dict[str, np.ndarray]:
    tensors = {
        "text_input": np.array([[prompt.encode()]], dtype=np.object_),
        "max_tokens": np.array([[max_tokens]], dtype=np.int32),
    }
    for name, value in extra.items():
        tensors[name] = value if isinstance(value, np.ndarray) else np.array([[value]], dtype=_dtype(value))
    return tensors


def _dtype(value):
    return {bool: np.bool_, int: np.int32, float: np.float32}[type(value)]


def script(**spec) -> str:
    return "SCRIPT:" + json.dumps(spec)


def text_of(response: Response) -> str:
    return response.outputs["text_output"].reshape(-1)[0].decode("utf-8")


def count(response: Response, name: str) -> int:
    value = response.outputs[name]
    assert value.dtype == np.int32 and value.shape == (1, 1), (name, value.dtype, value.shape)
    return int(value[0, 0])


def wait_for_log(server: TritonServer, marker: str, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker in Path(server.log_path).read_text(errors="replace"):
            return True
        time.sleep(0.1)
    return False


# ---------------------------------------------------------------------------------------
# ensemble / tensorrt_llm_bls interface
# ---------------------------------------------------------------------------------------


def test_ensemble_streams_tokens_decoded_in_isolation_then_flag_only_final(server, tokenizer):
    prompt = "Say hi"
    out_ids = tokenizer.encode(DEFAULT_TEXT, add_special_tokens=False)
    responses = call(server, "ensemble", ensemble_inputs(
        prompt, stream=True, return_num_input_tokens=True, return_num_output_tokens=True))
    tokens, eos, final = responses[: len(out_ids)], responses[len(out_ids)], responses[-1]
    assert len(responses) == len(out_ids) + 2
    assert [text_of(r) for r in tokens] == [tokenizer.decode([i]) for i in out_ids]
    assert all(r.outputs["text_output"].shape == (1, 1) and not r.final for r in tokens)
    assert [count(r, "num_output_tokens") for r in tokens] == [1] * len(out_ids)
    assert {count(r, "num_input_tokens") for r in tokens} == {len(tokenizer.encode(prompt))}
    # Ended at end_id: the engine's last result has no token, the postprocessor decodes it to "".
    assert text_of(eos) == "" and count(eos, "num_output_tokens") == 0 and not eos.final
    assert final.final and final.outputs == {} and final.error is None
    joined = "".join(text_of(r) for r in tokens)
    assert "\ufffd" in joined and joined != DEFAULT_TEXT  # multi-byte characters broken per token


def test_ensemble_non_streaming_prepends_prompt_unless_excluded(server, tokenizer):
    prompt = "Tell me"
    prompt_ids = tokenizer.encode(prompt)
    out_ids = tokenizer.encode(DEFAULT_TEXT, add_special_tokens=False)
    flags = dict(return_num_input_tokens=True, return_num_output_tokens=True)
    with_prompt = call(server, "ensemble", ensemble_inputs(prompt, **flags))
    assert len(with_prompt) == 2 and with_prompt[1].final and with_prompt[1].outputs == {}
    assert text_of(with_prompt[0]) == prompt + DEFAULT_TEXT and not with_prompt[0].final
    assert count(with_prompt[0], "num_input_tokens") == len(prompt_ids)
    assert count(with_prompt[0], "num_output_tokens") == len(prompt_ids) + len(out_ids)
    excluded = call(server, "ensemble", ensemble_inputs(prompt, exclude_input_in_output=True, **flags))
    assert text_of(excluded[0]) == DEFAULT_TEXT and count(excluded[0], "num_output_tokens") == len(out_ids)
    assert excluded[1].final and excluded[1].outputs == {}


def test_ensemble_max_tokens_and_counts_off_by_default(server, tokenizer):
    out_ids = tokenizer.encode(DEFAULT_TEXT, add_special_tokens=False)
    responses = call(server, "ensemble", ensemble_inputs("x", max_tokens=3, stream=True))
    assert [text_of(r) for r in responses[:-1]] == [tokenizer.decode([i]) for i in out_ids[:3]]  # no "" (length)
    assert set(responses[0].outputs) == {"text_output"}
    assert responses[-1].final and responses[-1].outputs == {}


def test_ensemble_stop_words_keep_the_stop_word(server):
    prompt = script(text="one two three four five")
    stop = np.array([[b" nine", b" three"]], dtype=np.object_)
    streamed = call(server, "ensemble", ensemble_inputs(prompt, stream=True, stop_words=stop))
    assert "".join(text_of(r) for r in streamed[:-1]) == "one two three"
    assert streamed[-1].final and streamed[-1].outputs == {}
    whole = call(server, "ensemble", ensemble_inputs(prompt, stop_words=stop, exclude_input_in_output=True))
    assert text_of(whole[0]) == "one two three"


def test_ensemble_log_probs(server):
    responses = call(server, "ensemble", ensemble_inputs(
        script(text=" a b c", finish="length"), return_log_probs=True, exclude_input_in_output=True))
    assert responses[0].outputs["output_log_probs"].shape == (1, 1, 3)
    np.testing.assert_allclose(responses[0].outputs["output_log_probs"][0, 0], [-0.1, -0.2, -0.3], rtol=1e-6)
    np.testing.assert_allclose(responses[0].outputs["cum_log_probs"], [[-0.6]], rtol=1e-6)


def test_ensemble_echo_request_reports_names_dtypes_shapes(server):
    tensors = ensemble_inputs(
        script(echo_request=True), max_tokens=7, stream=True, temperature=0.5, top_p=0.9, top_k=4,
        seed=np.array([[42]], dtype=np.uint64), stop_words=np.array([[b"a", b"b"]], dtype=np.object_),
        exclude_input_in_output=True, return_num_input_tokens=True,
        guided_decoding_guide_type=np.array([[b"json_schema"]], dtype=np.object_),
        lora_task_id=np.array([[3]], dtype=np.uint64))
    responses = call(server, "ensemble", tensors, request_id="echo-1")
    assert len(responses) == 2 and responses[1].final
    echo = json.loads(text_of(responses[0]))
    got = {name: (d["dtype"], d["shape"]) for name, d in echo["inputs"].items()}
    assert got == {
        "text_input": ("BYTES", [1, 1]), "max_tokens": ("INT32", [1, 1]), "stream": ("BOOL", [1, 1]),
        "temperature": ("FP32", [1, 1]), "top_p": ("FP32", [1, 1]), "top_k": ("INT32", [1, 1]),
        "seed": ("UINT64", [1, 1]), "stop_words": ("BYTES", [1, 2]), "exclude_input_in_output": ("BOOL", [1, 1]),
        "return_num_input_tokens": ("BOOL", [1, 1]), "guided_decoding_guide_type": ("BYTES", [1, 1]),
        "lora_task_id": ("UINT64", [1, 1]),
    }
    assert echo["inputs"]["stop_words"]["value"] == [["a", "b"]]
    assert echo["inputs"]["seed"]["value"] == [[42]]
    assert echo["request_id"] == "echo-1"


def test_ensemble_unknown_input_is_rejected_by_triton(server):
    responses = call(server, "ensemble", ensemble_inputs("x", random_seed=np.array([[1]], dtype=np.uint64)))
    assert responses[0].error and "random_seed" in responses[0].error


def test_ensemble_error_response_then_flag_only_final(server):
    responses = call(server, "ensemble", ensemble_inputs(
        script(text=" a b c d", error_after=2, error_message="engine exploded"), stream=True))
    assert [text_of(r) for r in responses[:2]] == [" a", " b"]
    assert "engine exploded" in responses[2].error
    assert responses[3].final and responses[3].outputs == {} and len(responses) == 4
    bad = call(server, "ensemble", ensemble_inputs("x", max_tokens=0))
    assert "max_tokens must be a single value > 0" in bad[0].error and bad[1].final


def test_ensemble_cancellation_is_seen_and_logged(server):
    responses = call(server, "ensemble", ensemble_inputs(script(text=" a b c d", hang_after=2), stream=True),
                     request_id="cancel-ens", cancel_after=2)
    assert [text_of(r) for r in responses] == [" a", " b"]
    assert wait_for_log(server, "ensemble: request 'cancel-ens' cancelled after 2 tokens")


# ---------------------------------------------------------------------------------------
# tensorrt_llm (C++ backend) interface
# ---------------------------------------------------------------------------------------


def trtllm_inputs(tokenizer, prompt: str, max_tokens: int = 64, **extra) -> dict[str, np.ndarray]:
    ids = tokenizer.encode(prompt)
    tensors = {
        "input_ids": np.array([ids], dtype=np.int32),
        "input_lengths": np.array([[len(ids)]], dtype=np.int32),
        "request_output_len": np.array([[max_tokens]], dtype=np.int32),
    }
    for name, value in extra.items():
        tensors[name] = value if isinstance(value, np.ndarray) else np.array([[value]], dtype=_dtype(value))
    return tensors


def ids_of(response: Response) -> list[int]:
    output_ids, lengths = response.outputs["output_ids"], response.outputs["sequence_length"]
    assert output_ids.dtype == np.int32 and output_ids.shape[:2] == (1, 1)
    assert lengths.dtype == np.int32 and lengths.shape == (1, 1) and lengths[0, 0] == output_ids.shape[2]
    return output_ids[0, 0].tolist()


def word_list(tokenizer, words: list[str]) -> np.ndarray:
    """NVIDIA's stop_words_list layout for one batch item: [[ids...], [cumulative ends..., -1 pad]]."""
    seqs = [tokenizer.encode(w, add_special_tokens=False) for w in words]
    flat = [i for s in seqs for i in s]
    offsets = list(np.cumsum([len(s) for s in seqs]))
    width = max(len(flat), 1)
    return np.array([[flat + [0] * (width - len(flat)), offsets + [-1] * (width - len(offsets))]], dtype=np.int32)


def test_tensorrt_llm_streams_new_ids_and_flags_final_on_empty_last_response(server, tokenizer):
    prompt = "Say hi"
    out_ids = tokenizer.encode(DEFAULT_TEXT, add_special_tokens=False)
    responses = call(server, "tensorrt_llm", trtllm_inputs(
        tokenizer, prompt, streaming=True, return_num_input_tokens=True, return_num_output_tokens=True,
        return_log_probs=True))
    assert len(responses) == len(out_ids) + 1
    assert [ids_of(r) for r in responses[:-1]] == [[i] for i in out_ids]
    assert not any(r.final for r in responses[:-1])
    assert {count(r, "num_input_tokens") for r in responses} == {len(tokenizer.encode(prompt))}
    assert [count(r, "num_output_tokens") for r in responses] == [1] * len(out_ids) + [0]
    np.testing.assert_allclose(responses[1].outputs["output_log_probs"], [[[-0.2]]], rtol=1e-6)
    last = responses[-1]  # ended at end_id: the executor's final result carries no new token
    assert last.final and ids_of(last) == []


def test_tensorrt_llm_length_and_end_id_and_stop_words(server, tokenizer):
    out_ids = tokenizer.encode(DEFAULT_TEXT, add_special_tokens=False)
    by_length = call(server, "tensorrt_llm", trtllm_inputs(tokenizer, "x", max_tokens=2, streaming=True))
    assert [ids_of(r) for r in by_length] == [[out_ids[0]], [out_ids[1]]] and by_length[-1].final
    with_end = call(server, "tensorrt_llm", trtllm_inputs(
        tokenizer, script(ids=[11, 12, 99, 13]), end_id=99, exclude_input_in_output=True))
    assert len(with_end) == 1 and with_end[0].final and ids_of(with_end[0]) == [11, 12]
    text = " alpha beta gamma delta"
    stop = word_list(tokenizer, [" zeta", " gamma"])
    stopped = call(server, "tensorrt_llm", trtllm_inputs(
        tokenizer, script(text=text), streaming=True, stop_words_list=stop))
    ids = [i for r in stopped for i in ids_of(r)]
    assert tokenizer.decode(ids) == " alpha beta gamma" and stopped[-1].final and ids_of(stopped[-1]) != []


def test_tensorrt_llm_non_streaming_returns_prompt_ids_unless_excluded(server, tokenizer):
    prompt = "Tell me"
    prompt_ids = tokenizer.encode(prompt)
    out_ids = tokenizer.encode(DEFAULT_TEXT, add_special_tokens=False)
    whole = call(server, "tensorrt_llm", trtllm_inputs(tokenizer, prompt, return_num_output_tokens=True))
    assert len(whole) == 1 and whole[0].final
    assert ids_of(whole[0]) == prompt_ids + out_ids
    assert count(whole[0], "num_output_tokens") == len(prompt_ids) + len(out_ids)
    excluded = call(server, "tensorrt_llm", trtllm_inputs(tokenizer, prompt, exclude_input_in_output=True))
    assert ids_of(excluded[0]) == out_ids and excluded[0].final


def test_tensorrt_llm_echo_request_shows_reshaped_inputs(server, tokenizer):
    tensors = trtllm_inputs(tokenizer, script(echo_request=True), max_tokens=5, streaming=True,
                            runtime_top_k=3, temperature=0.7, seed=np.array([[9]], dtype=np.uint64),
                            stop_words_list=word_list(tokenizer, [" a", " bc"]))
    responses = call(server, "tensorrt_llm", tensors)
    assert len(responses) == 1 and responses[0].final
    echo = json.loads(tokenizer.decode(ids_of(responses[0])))
    got = {name: (d["dtype"], d["shape"]) for name, d in echo["inputs"].items()}
    # `reshape: { shape: [ ] }` inputs arrive without their dims: [1] instead of [1, 1].
    assert got == {
        "input_ids": ("INT32", [1, len(tensors["input_ids"][0])]), "input_lengths": ("INT32", [1]),
        "request_output_len": ("INT32", [1]), "streaming": ("BOOL", [1]), "runtime_top_k": ("INT32", [1]),
        "temperature": ("FP32", [1]), "seed": ("UINT64", [1]), "stop_words_list": ("INT32", [1, 2, 3]),
    }
    assert echo["inputs"]["stop_words_list"]["value"][0][1] == [1, 3, -1]


def test_tensorrt_llm_error_is_one_final_response(server, tokenizer):
    responses = call(server, "tensorrt_llm", trtllm_inputs(
        tokenizer, script(text=" a b c", error_after=1, error_message="engine exploded"), streaming=True))
    assert len(responses) == 2 and ids_of(responses[0]) == tokenizer.encode(" a", add_special_tokens=False)
    assert "Executor failed process requestId" in responses[1].error and "engine exploded" in responses[1].error


def test_tensorrt_llm_cancellation_and_stop_request(server, tokenizer):
    hanging = trtllm_inputs(tokenizer, script(text=" a b c d", hang_after=1), streaming=True)
    responses = call(server, "tensorrt_llm", hanging, request_id="cancel-trt", cancel_after=1)
    assert len(responses) == 1
    assert wait_for_log(server, "tensorrt_llm: request 'cancel-trt' cancelled after 1 tokens")

    # The BLS's way: a second request with the same id and stop=true ends the first one.
    results: queue.Queue = queue.Queue()
    worker = threading.Thread(target=lambda: results.put(call(server, "tensorrt_llm", hanging, request_id="stop-trt")))
    worker.start()
    time.sleep(0.5)
    stop_reply = call(server, "tensorrt_llm", trtllm_inputs(tokenizer, "x", stop=True), request_id="stop-trt")
    assert len(stop_reply) == 1 and stop_reply[0].final and stop_reply[0].outputs == {}
    stopped = results.get(timeout=10)
    worker.join()
    assert ids_of(stopped[0]) == tokenizer.encode(" a", add_special_tokens=False)
    assert stopped[-1].final and ids_of(stopped[-1]) == []
    assert wait_for_log(server, "tensorrt_llm: request 'stop-trt' stopped after 1 tokens")
