"""`openai_embeddings` on the real tritonserver, in front of `vllm_embed` (the tiny model's weights
as an embedding model on the local vLLM backend): through `generate` over each loopback
transport, through the gateway with the official `openai` SDK unchanged (floats and base64),
compared with vLLM's own `/v1/embeddings` server on the same model files (same vectors within
float32 rounding, same token counts); bad requests get OpenAI's 400s and never reach the engine;
and the local vLLM backend's `embedding_request` answered tensor for tensor as NVIDIA's backend
answers it (src/utils/request.py `EmbedRequest`, src/model.py `_validate_request_task_name`).

Deliberate differences from vLLM's server:
- `use_activation: false`, `padding: max_length`, `mm_processor_kwargs`, chat-style input
  (`messages`), `encoding_format` bytes / bytes_only and `embed_dtype` fp8 are refused with a 400
  naming the field (Triton's vLLM backend carries only the input and `dimensions`; the answer is
  JSON in a string tensor);
- the usage has no `completion_tokens: 0` (OpenAI's has none either), and ids are
  `embd-<request id>`.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import openai
import pytest
import requests

from tests.helpers import ChatClient, served_app
from tritonchat.clients.gateway import create_app

pytestmark = [pytest.mark.integration, pytest.mark.models("openai_embeddings")]

SERVED = "tiny-embed"
TRANSPORT_MODELS = {"http": "openai_embeddings", "grpc": "openai_embeddings_grpc", "bls": "openai_embeddings_bls"}


def body(input_, **fields) -> dict:
    return {"model": SERVED, "input": input_, **fields}


def vectors(response: dict) -> list[np.ndarray]:
    """The response's vectors in order (base64 ones decoded as the `openai` SDK does: float32, little-endian)."""
    assert response["object"] == "list"
    assert [item["index"] for item in response["data"]] == list(range(len(response["data"])))
    out = []
    for item in response["data"]:
        assert item["object"] == "embedding"
        value = item["embedding"]
        out.append(np.frombuffer(base64.b64decode(value), dtype="<f4") if isinstance(value, str)
                   else np.asarray(value, dtype=np.float64))
    return out


@pytest.fixture(scope="module", autouse=True)
def _unloaded_after(triton):
    """The embedding models and their engine serve only this module: unloaded after it, callers
    first, so the session's server does not stop with a second vLLM engine to shut down."""
    yield
    for name in (*TRANSPORT_MODELS.values(), "embeddings_not_matryoshka", "embeddings_of_chat", "vllm_embed"):
        if name in triton.loaded:
            triton.unload(name)


@pytest.fixture
def client(triton) -> ChatClient:
    return ChatClient(triton.http_url, "openai_embeddings")


def engine_requests(triton, model: str = "vllm_embed") -> int:
    """How many requests Triton has handed to `model` so far."""
    stats = requests.get(f"http://{triton.http_url}/v2/models/{model}/stats", timeout=10).json()
    return sum(entry["inference_count"] for entry in stats["model_stats"])


# ---- generate, each transport -----------------------------------------------------------------


def test_one_input_as_floats_and_as_base64(client, tokenizer):
    status, response = client.create(body("Hello world"), request_id="7")
    assert status == 200, response
    (vector,) = vectors(response)
    assert response["id"] == "embd-7" and response["model"] == SERVED
    assert vector.shape == (128,) and abs(np.linalg.norm(vector) - 1) < 1e-5  # normalized by the pooler
    tokens = len(tokenizer("Hello world").input_ids)  # with BOS, as vLLM tokenizes
    assert response["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    status, encoded = client.create(body("Hello world", encoding_format="base64"))
    assert status == 200 and isinstance(encoded["data"][0]["embedding"], str)
    assert np.array_equal(vectors(encoded)[0], vector.astype(np.float32))


@pytest.mark.parametrize("transport", list(TRANSPORT_MODELS))
def test_every_input_shape_over_every_transport(triton, transport):
    client = ChatClient(triton.http_url, TRANSPORT_MODELS[transport])
    triton.load(TRANSPORT_MODELS[transport])
    status, texts = client.create(body(["the river", "a cat", "the river"]))
    assert status == 200, texts
    first, second, again = vectors(texts)
    assert np.allclose(first, again, atol=1e-6) and not np.allclose(first, second, atol=1e-3)
    ids = client.create(body([1, 266, 362]))[1]
    lists = client.create(body([[1, 266, 362], [1, 82]]))[1]
    assert np.allclose(vectors(ids)[0], vectors(lists)[0], atol=1e-6)
    assert ids["usage"]["prompt_tokens"] == 3 and lists["usage"]["prompt_tokens"] == 5
    status, cut = client.create(body("the river", dimensions=32))
    assert status == 200 and vectors(cut)[0].shape == (32,)


def test_truncation_and_special_tokens_are_carried_out(client, tokenizer):
    text = "the river runs by the old mill"
    full = tokenizer(text).input_ids
    _, right = client.create(body(text, truncate_prompt_tokens=3))
    _, same = client.create(body(full[:3]))
    assert right["usage"]["prompt_tokens"] == 3 and np.allclose(vectors(right)[0], vectors(same)[0], atol=1e-6)
    _, left = client.create(body(text, truncate_prompt_tokens=3, truncation_side="left"))
    _, tail = client.create(body(full[-3:]))
    assert np.allclose(vectors(left)[0], vectors(tail)[0], atol=1e-6)
    _, bare = client.create(body(text, add_special_tokens=False))
    assert bare["usage"]["prompt_tokens"] == len(full) - 1


# ---- bad requests: OpenAI's 400s, nothing reaches the engine ------------------------------------

BAD = [
    (body(""), "input", None),
    (body([]), "input", None),
    (body([[]]), "input", None),
    (body(["a", 1]), "input[1]", None),
    (body(True), "input", None),
    (body([-1]), "input[0]", None),
    (body([5000]), "input", None),
    (body("x " * 2100), "input", "context_length_exceeded"),
    (body(["ok", "x " * 2100]), "input[1]", "context_length_exceeded"),
    (body("x", dimensions=33), "dimensions", None),
    (body("x", dimensions=0), "dimensions", None),
    (body("x", encoding_format="bytes"), "encoding_format", None),
    (body("x", encoding_format="ascii"), "encoding_format", None),
    (body("x", normalize=True), "normalize", None),
    (body("x", use_activation=False), "use_activation", None),
    (body("x", truncate_prompt_tokens=5000), "truncate_prompt_tokens", None),
    (body("x", embed_dtype="fp8_e4m3"), "embed_dtype", None),
    (body("x", messages=[{"role": "user", "content": "x"}]), "messages", None),
]


@pytest.mark.parametrize(("request_", "param", "code"), BAD, ids=[f"{i}-{case[1]}" for i, case in enumerate(BAD)])
def test_bad_requests_are_400s_that_never_reach_the_engine(triton, client, request_, param, code):
    before = engine_requests(triton)
    status, error = client.create(request_)
    assert status == 400
    assert error["error"]["type"] == "invalid_request_error" and error["error"]["param"] == param
    assert error["error"]["code"] == code
    assert engine_requests(triton) == before


def test_vllms_words_for_dimensions(client, triton):
    _, error = client.create(body("x", dimensions=33))
    assert error["error"]["message"] == "Model 'tiny-embed' only supports Matryoshka dimensions [32, 64, 128], got 33."
    triton.load("embeddings_not_matryoshka")
    status, error = client.create(body("x", dimensions=32), model="embeddings_not_matryoshka")
    assert status == 400 and error["error"]["message"] == (
        "Model 'tiny-embed' does not support Matryoshka embeddings; dimensions must be unset (received dimensions=32).")
    status, response = client.create(body("x"), model="embeddings_not_matryoshka")
    assert status == 200 and len(response["data"][0]["embedding"]) == 128


def test_an_unknown_model_and_fields_nobody_knows(client):
    status, error = client.create(body("x", model="text-embedding-3-small"))
    assert status in (400, 404) and error["error"]["code"] == "model_not_found"  # 2.51 answers 400 for all
    status, response = client.create(body("x", foo=1, user="u1", request_id="r", priority=0))
    assert status == 200 and len(response["data"]) == 1


# ---- the gateway and the openai SDK ----------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(triton):
    app = create_app(triton.http_url, embeddings_model="openai_embeddings")
    with served_app(app) as url:
        yield url


def test_the_openai_sdk_through_the_gateway(gateway, client):
    with openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0) as sdk:
        floats = sdk.embeddings.create(model=SERVED, input=["the river", "a cat"], encoding_format="float")
        assert [item.index for item in floats.data] == [0, 1] and len(floats.data[0].embedding) == 128
        assert floats.usage.prompt_tokens == floats.usage.total_tokens > 0 and floats.model == SERVED
        decoded = sdk.embeddings.create(model=SERVED, input=["the river", "a cat"])  # the SDK asks for base64
        for ours, theirs in zip(floats.data, decoded.data):
            assert np.allclose(ours.embedding, theirs.embedding, atol=1e-7)
        cut = sdk.embeddings.create(model=SERVED, input="the river", dimensions=64)
        assert len(cut.data[0].embedding) == 64
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.embeddings.create(model=SERVED, input="")
        assert refused.value.status_code == 400 and refused.value.body["param"] == "input"
        with pytest.raises(openai.NotFoundError):
            sdk.embeddings.create(model="text-embedding-3-small", input="x")
    # a "stream" field (no embeddings API has one) does not make the gateway stream
    answer = requests.post(f"{gateway}/v1/embeddings", json=body("x", stream=True), timeout=60)
    assert answer.status_code == 200 and answer.json()["object"] == "list"


# ---- compared with vLLM's own server -------------------------------------------------------------

SAME_AS_VLLM = [
    body("Hello world"),
    body(["the river", "a cat sat on the mat", "x"]),
    body([1, 266, 362, 82]),
    body([[1, 266], [1, 597, 417, 82]]),
    body("the river runs by the old mill", dimensions=64),
    body(["the river runs by the old mill"], truncate_prompt_tokens=4),
    body("the river runs by the old mill", truncate_prompt_tokens=4, truncation_side="left"),
    body("the river", add_special_tokens=False),
    body(["the river", "a cat"], encoding_format="base64"),
    body("the river", encoding_format="base64", embed_dtype="float16"),
    body("the river", encoding_format="base64", embed_dtype="bfloat16", endianness="big"),
]


@pytest.mark.parametrize("case", SAME_AS_VLLM, ids=[str(i) for i in range(len(SAME_AS_VLLM))])
def test_same_vectors_and_counts_as_vllms_server(vllm_embedding_server, client, case):
    reference = requests.post(f"{vllm_embedding_server}/v1/embeddings", json=case, timeout=60)
    assert reference.status_code == 200, reference.text
    theirs = reference.json()
    status, ours = client.create(case)
    assert status == 200, ours
    assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]
    assert ours["usage"]["total_tokens"] == theirs["usage"]["total_tokens"]
    assert len(ours["data"]) == len(theirs["data"])
    if case.get("embed_dtype", "float32") != "float32" or case.get("endianness", "native") != "native":
        # the bytes themselves: same dtype, rounding and byte order
        assert [item["embedding"] for item in ours["data"]] == [item["embedding"] for item in theirs["data"]]
        return
    for mine, reference_vector in zip(vectors(ours), vectors(theirs)):
        assert mine.shape == reference_vector.shape
        assert np.allclose(mine, reference_vector, atol=1e-5), np.abs(mine - reference_vector).max()


def test_same_refusals_as_vllms_server(vllm_embedding_server, client):
    for case in (body("x", dimensions=33), body("x", normalize=True), body("x " * 2100),
                 body("x", truncate_prompt_tokens=5000)):
        theirs = requests.post(f"{vllm_embedding_server}/v1/embeddings", json=case, timeout=60)
        status, _ = client.create(case)
        assert status == theirs.status_code == 400, (case, theirs.text)


# ---- the local vLLM backend's embedding interface, raw ---------------------------------------------


def raw(triton, model: str, embedding_request: dict | None, returns: bool = True, text: str = ""):
    """One request to a vLLM-backend model over gRPC, as Triton's OpenAI frontend sends an embedding
    request: (result, error)."""
    import queue

    import tritonclient.grpc as grpcclient

    def tensor(name, value, dtype):
        array = np.array([value], dtype=dtype)
        infer = grpcclient.InferInput(name, [1], {np.object_: "BYTES", np.bool_: "BOOL"}[dtype])
        infer.set_data_from_numpy(array)
        return infer

    inputs = [tensor("text_input", text.encode(), np.object_)]
    if embedding_request is not None:
        inputs.append(tensor("embedding_request", json.dumps(embedding_request).encode(), np.object_))
    if returns:
        inputs += [tensor("return_num_input_tokens", True, np.bool_), tensor("return_num_output_tokens", True, np.bool_)]
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(model, inputs)
        return results.get(timeout=120)
    finally:
        client.stop_stream()
        client.close()


def test_the_local_backend_answers_an_embedding_request_as_nvidias_does(triton, tokenizer):
    triton.load("vllm_embed")
    result, error = raw(triton, "vllm_embed", {"input": "hello world", "pooling_params": {}})
    assert error is None
    response = result.get_response()
    assert {output.name: (output.datatype, list(output.shape)) for output in response.outputs} == {
        "text_output": ("BYTES", [1]), "num_input_tokens": ("UINT32", []), "num_output_tokens": ("UINT32", [])}
    assert response.parameters["triton_final_response"].bool_param
    vector = json.loads(result.as_numpy("text_output")[0])
    assert len(vector) == 128 and all(isinstance(value, float) for value in vector)
    assert int(result.as_numpy("num_input_tokens")) == len(tokenizer("hello world").input_ids)
    assert int(result.as_numpy("num_output_tokens")) == 0
    # token ids, `dimensions` as Triton's OpenAI frontend sends it ([N]), no token counts asked for
    result, error = raw(triton, "vllm_embed", {"input": [1, 266, 362], "pooling_params": {"dimensions": [32]}},
                        returns=False)
    assert error is None and [output.name for output in result.get_response().outputs] == ["text_output"]
    assert len(json.loads(result.as_numpy("text_output")[0])) == 32


def test_the_local_backends_errors_are_nvidias(triton):
    triton.load("vllm_embed")
    _, error = raw(triton, "vllm_embed", {"input": "x", "pooling_params": {"dimensions": [33]}})
    assert error is not None and error.message() == (
        "Error generating stream: Model 'tiny-embed' only supports Matryoshka dimensions [32, 64, 128], got 33.")
    _, error = raw(triton, "vllm_embed", None, text="Hello")  # a generate request
    assert error.message() == "Error generating stream: Model vllm_embed does not support 'generate' request"


def test_a_target_that_does_not_embed(triton):
    triton.load("embeddings_of_chat")  # in front of vllm_model: the tiny chat model, generate only
    _, error = raw(triton, "vllm_model", {"input": "x", "pooling_params": {}})
    assert error.message() == "Error generating stream: Model vllm_model does not support 'embed' request"
    status, answer = ChatClient(triton.http_url, "embeddings_of_chat").create({"model": "tiny-chat", "input": "x"})
    assert status in (400, 500) and answer["error"]["type"] == "server_error"  # 2.51's generate says 400 for all
    assert "does not support 'embed' request" in answer["error"]["message"]


def test_a_tensorrt_llm_format_is_refused_at_load(triton):
    with pytest.raises(RuntimeError) as failed:
        triton.load("embeddings_trtllm")
    assert "openai_embeddings needs Triton's vLLM backend (request_format 'vllm'), not 'trtllm'" in str(failed.value)
