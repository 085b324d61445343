"""OpenAI embeddings without a server: the request's validation (protocol/embeddings.py), what the
service sends per input (embeddings/service.py, target.py), the response and its base64 encodings
(response.py), the `openai_embeddings` Triton model driven as Triton drives it, and the gateway's
`/v1/embeddings` route."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from openai.types import CreateEmbeddingResponse

from harness.tiny_embedding_model import MATRYOSHKA_DIMENSIONS
from tests.unit import fakes
from tests.unit.test_gateway import FakeWire, triton_transport
from tests.unit.test_triton_glue import Stub
from tritonchat.clients.gateway import create_app, parser
from tritonchat.embeddings import EmbeddingsBuilder, EmbeddingService
from tritonchat.embeddings.response import encode_base64, to_bfloat16_bits
from tritonchat.embeddings.target import EmbeddingInput, VllmEmbeddingFormat
from tritonchat.errors import BadRequestError, ConfigError, InternalError, NotFoundError
from tritonchat.formats import FormatOptions, GenerationOutput
from tritonchat.protocol.embeddings import MAX_INPUTS, parse_embedding_request
from tritonchat.settings import Settings
from tritonchat.target import TargetInterface
from tritonchat.triton import OpenAIEmbeddingsModel


def body(input_="Hello world", **fields) -> str:
    return json.dumps({"model": "tiny-embed", "input": input_, **fields})


# ---- the request -------------------------------------------------------------------------------


@pytest.mark.parametrize(("input_", "inputs"), [
    ("Hello", ["Hello"]),
    (["a", "b"], ["a", "b"]),
    ([1, 2, 3], [[1, 2, 3]]),
    ([[1, 2], [3]], [[1, 2], [3]]),
])
def test_every_input_shape_is_one_item_per_embedding(input_, inputs):
    request = parse_embedding_request(body(input_))
    assert request.inputs == inputs
    assert (request.encoding_format, request.add_special_tokens, request.embed_dtype) == ("float", True, "float32")


@pytest.mark.parametrize(("fields", "param"), [
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": [[]]}, "input"),
    ({"input": [""]}, "input"),
    ({"input": ["a", 1]}, "input[1]"),
    ({"input": [1, "a"]}, "input[0]"),
    ({"input": [True]}, "input[0]"),
    ({"input": 3}, "input"),
    ({"input": [1.0]}, "input[0]"),
    ({"input": ["x"] * (MAX_INPUTS + 1)}, "input"),
    ({"dimensions": 0}, "dimensions"),
    ({"dimensions": "32"}, "dimensions"),
    ({"encoding_format": "hex"}, "encoding_format"),
    ({"encoding_format": "bytes"}, "encoding_format"),
    ({"encoding_format": "bytes_only"}, "encoding_format"),
    ({"embed_dtype": "fp8_e5m2"}, "embed_dtype"),
    ({"embed_dtype": "int8"}, "embed_dtype"),
    ({"endianness": "middle"}, "endianness"),
    ({"normalize": False}, "normalize"),
    ({"use_activation": False}, "use_activation"),
    ({"padding": "max_length"}, "padding"),
    ({"mm_processor_kwargs": {"a": 1}}, "mm_processor_kwargs"),
    ({"messages": [{"role": "user", "content": "x"}]}, "messages"),
    ({"task": "classify"}, "task"),
    ({"truncate_prompt_tokens": -2}, "truncate_prompt_tokens"),
    ({"truncation_side": "middle"}, "truncation_side"),
    ({"add_special_tokens": "yes"}, "add_special_tokens"),
])
def test_bad_requests_name_the_field(fields, param):
    data = {"model": "tiny-embed", "input": "x", **fields}
    with pytest.raises(BadRequestError) as refused:
        parse_embedding_request(json.dumps(data))
    assert refused.value.param == param and refused.value.status == 400


def test_no_op_values_and_fields_nobody_knows_are_accepted():
    request = parse_embedding_request(body(use_activation=True, padding="do_not_pad", user="u", request_id="r",
                                           priority=0, cache_salt="salt", task="embed", foo={"bar": 1}))
    assert request.inputs == ["Hello world"]


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", '"text"'])
def test_a_body_that_is_not_a_json_object(raw):
    with pytest.raises(BadRequestError):
        parse_embedding_request(raw)


# ---- the service ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def service(tiny_embedding_model) -> EmbeddingService:
    return EmbeddingService(Settings(tokenizer=str(tiny_embedding_model), served_model_name="tiny-embed",
                                     max_model_len=64))


def sent(service: EmbeddingService, request: str) -> list[dict]:
    prepared = service.complete(service.stage(request, "r1"))
    return [json.loads(call.inputs["embedding_request"][0]) for call in prepared.calls]


def test_texts_go_as_texts_and_ids_as_ids(service):
    assert sent(service, body(["a b", "c"])) == [{"input": "a b", "pooling_params": {}},
                                                 {"input": "c", "pooling_params": {}}]
    assert sent(service, body([[1, 2], [3]], dimensions=32)) == [
        {"input": [1, 2], "pooling_params": {"dimensions": [32]}}, {"input": [3], "pooling_params": {"dimensions": [32]}}]


def test_truncation_and_special_tokens_send_token_ids(service):
    tokenizer = service.tokenizer
    text = "the river runs by the old mill"
    ids = tokenizer(text).input_ids
    assert sent(service, body(text, truncate_prompt_tokens=3)) == [{"input": ids[:3], "pooling_params": {}}]
    assert sent(service, body(text, truncate_prompt_tokens=3, truncation_side="left")) == [
        {"input": ids[-3:], "pooling_params": {}}]
    assert sent(service, body(text, add_special_tokens=False)) == [
        {"input": tokenizer(text, add_special_tokens=False).input_ids, "pooling_params": {}}]
    assert sent(service, body([ids], truncate_prompt_tokens=-1)) == [{"input": ids, "pooling_params": {}}]
    assert sent(service, body([[5, 6, 7, 8]], truncate_prompt_tokens=2, truncation_side="left")) == [
        {"input": [7, 8], "pooling_params": {}}]


@pytest.mark.parametrize(("request_", "param", "code", "words"), [
    (body("x " * 80), "input", "context_length_exceeded", "maximum context length is 64 tokens"),
    (body(["ok", "x " * 80]), "input[1]", "context_length_exceeded", "'input[1]' has"),
    (body([[1] * 65]), "input[0]", "context_length_exceeded", "65 tokens"),
    (body([4096]), "input", None, "Token id 4096 in 'input' is out of vocabulary"),
    (body("x", truncate_prompt_tokens=65), "truncate_prompt_tokens", None, "cannot be greater than max_model_len = 64"),
    (body("x", truncate_prompt_tokens=0), "input", None, "no tokens left"),
    (body("x", dimensions=33), "dimensions", None, f"only supports Matryoshka dimensions {MATRYOSHKA_DIMENSIONS}"),
    (body("x", dimensions=129), "dimensions", None, "only supports dimensions in range [1, 128], got 129"),
])
def test_what_the_model_cannot_take_is_a_400(service, request_, param, code, words):
    with pytest.raises(BadRequestError) as refused:
        service.stage(request_)
    assert (refused.value.param, refused.value.code) == (param, code)
    assert words in refused.value.message


def test_model_names(service):
    with pytest.raises(NotFoundError):
        service.stage(body(model="text-embedding-3-small"))
    assert sent(service, json.dumps({"input": "x"})) == [{"input": "x", "pooling_params": {}}]  # no model: served


def test_a_model_without_matryoshka_sizes_refuses_dimensions(tiny_model):
    service = EmbeddingService(Settings(tokenizer=str(tiny_model), served_model_name="tiny-embed"))
    with pytest.raises(BadRequestError) as refused:
        service.stage(body("x", dimensions=32))
    assert refused.value.message == ("Model 'tiny-embed' does not support Matryoshka embeddings; dimensions must be "
                                     "unset (received dimensions=32).")


@pytest.mark.parametrize("fmt", ["trtllm", "tensorrt_llm", "llmapi"])
def test_tensorrt_llm_formats_are_refused_at_load(tiny_embedding_model, fmt):
    with pytest.raises(ConfigError, match="TensorRT-LLM's models have no embedding interface"):
        EmbeddingService(Settings(tokenizer=str(tiny_embedding_model), request_format=fmt))


def test_a_target_without_the_embedding_input_is_a_500(tiny_embedding_model):
    service = EmbeddingService(Settings(tokenizer=str(tiny_embedding_model), served_model_name="tiny-embed"))
    service.learn_target(TargetInterface(frozenset({"text_input", "sampling_parameters"}), frozenset({"text_output"})))
    with pytest.raises(InternalError, match="from release 25.11"):
        service.stage(body())


# ---- the backend's tensors -----------------------------------------------------------------------


def test_the_backends_tensors():
    fmt = VllmEmbeddingFormat(FormatOptions(target_model="vllm_embed"))
    inputs = fmt.inputs(EmbeddingInput([1, 2], 64))
    assert {name: (value.dtype, value.shape) for name, value in inputs.items()} == {
        "text_input": (np.object_, (1,)), "embedding_request": (np.object_, (1,)),
        "return_num_input_tokens": (np.bool_, (1,)), "return_num_output_tokens": (np.bool_, (1,))}
    assert inputs["text_input"][0] == b""
    assert json.loads(inputs["embedding_request"][0]) == {"input": [1, 2], "pooling_params": {"dimensions": [64]}}
    assert fmt.requested_outputs(EmbeddingInput("x")) == ["text_output", "num_input_tokens", "num_output_tokens"]
    output = fmt.parse({"text_output": np.array([b"[0.5, -0.25]"], dtype=np.object_),
                        "num_input_tokens": np.asarray(6, dtype=np.uint32),
                        "num_output_tokens": np.asarray(0, dtype=np.uint32)})
    assert (output.text, output.prompt_tokens, output.finish_reason) == ("[0.5, -0.25]", 6, None)
    assert not fmt.reports_finish_reason


# ---- the response -----------------------------------------------------------------------------


def built(encoding_format="float", vectors=([0.5, -0.25], [1.0, 0.0]), **fields) -> dict:
    builder = EmbeddingsBuilder(completion_id="embd-1", created=5, model="tiny-embed", system_fingerprint="",
                                choices=len(vectors), encoding_format=encoding_format, **fields)
    for index, vector in reversed(list(enumerate(vectors))):  # inputs finish in any order
        builder.add_output(index, GenerationOutput(text=json.dumps(vector), prompt_tokens=3 + index))
    return json.loads(builder.completion())


def test_the_response_is_openais():
    response = built()
    CreateEmbeddingResponse.model_validate(response)
    assert response == {"id": "embd-1", "object": "list", "created": 5, "model": "tiny-embed",
                        "data": [{"index": 0, "object": "embedding", "embedding": [0.5, -0.25]},
                                 {"index": 1, "object": "embedding", "embedding": [1.0, 0.0]}],
                        "usage": {"prompt_tokens": 7, "total_tokens": 7}}


def test_base64_is_little_endian_float32_as_the_sdk_reads_it():
    response = built("base64")  # (the SDK's type holds the floats it decoded)
    decoded = [np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4").tolist() for item in response["data"]]
    assert decoded == [[0.5, -0.25], [1.0, 0.0]]


def test_other_dtypes_and_byte_orders():
    assert base64.b64decode(encode_base64([0.5, -0.25], "float16")) == np.array([0.5, -0.25], "<f2").tobytes()
    assert base64.b64decode(encode_base64([0.5], "float32", "big")) == np.array([0.5], ">f4").tobytes()
    # bfloat16: the upper half of the float32, rounded to nearest even
    assert to_bfloat16_bits(np.array([1.0, -2.0, 1.00390625, 1.01171875], np.float32)).tolist() == [
        0x3F80, 0xC000, 0x3F80, 0x3F82]
    assert base64.b64decode(encode_base64([1.0], "bfloat16", "big")) == bytes([0x3F, 0x80])


def test_an_answer_without_a_vector_is_a_500():
    builder = EmbeddingsBuilder(completion_id="e", created=1, model="m", system_fingerprint="", choices=1)
    builder.add_output(0, GenerationOutput(text="N/A"))
    with pytest.raises(InternalError, match="no vector"):
        builder.completion()


# ---- the Triton model ---------------------------------------------------------------------------


def embedding_response(vector: list[float], tokens: int) -> fakes.InferenceResponse:
    return fakes.InferenceResponse([
        fakes.Tensor("text_output", np.array([json.dumps(vector).encode()], dtype=np.object_)),
        fakes.Tensor("num_input_tokens", np.asarray(tokens, dtype=np.uint32)),
        fakes.Tensor("num_output_tokens", np.asarray(0, dtype=np.uint32)),
    ])


@pytest.fixture
def stub(monkeypatch, tiny_embedding_model):
    made = []

    def make(script, **parameters):
        made.append(Stub(monkeypatch, tiny_embedding_model, script, model_class=OpenAIEmbeddingsModel,
                         tokenizer=str(tiny_embedding_model), served_model_name="tiny-embed", **parameters))
        return made[-1]

    yield make
    for one in made:
        one.close()


def test_one_call_per_input_and_one_final_response(stub):
    def answer(kwargs, index):
        request = json.loads(next(t for t in kwargs["inputs"] if t.name() == "embedding_request").as_numpy()[0])
        return fakes.ResponseIterator([embedding_response([float(index), 0.5], len(request["input"]))])

    model = stub(answer)
    request = fakes.Request(body(["ab", "abc"]), request_id="9")
    model.execute(request)
    [response] = request.sender.payloads()
    CreateEmbeddingResponse.model_validate(response)
    assert response["id"] == "embd-9" and response["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    assert sorted(tuple(item["embedding"]) for item in response["data"]) == [(0.0, 0.5), (1.0, 0.5)]
    assert [flags for _, flags in request.sender.responses] == [fakes.FINAL]
    assert len(model.calls) == 2 and all(call["requested_output_names"] == [
        "text_output", "num_input_tokens", "num_output_tokens"] for call in model.calls)
    assert [call["request_id"] for call in model.calls] == ["9.0", "9.1"]


def test_a_refused_request_never_calls_the_backend(stub):
    model = stub(lambda kwargs, index: fakes.ResponseIterator([embedding_response([0.5], 1)]))
    request = fakes.Request(body(""))
    model.execute(request)
    [(response, flags)] = request.sender.responses
    assert flags == fakes.FINAL and response.error().code() == fakes.TritonError.INVALID_ARG
    assert json.loads(response.error().message())["error"]["param"] == "input"
    assert model.calls == []


def test_a_backend_error_is_a_500_with_its_message(stub):
    def failing(_kwargs, _index):
        error = fakes.TritonError("Error generating stream: Model vllm_model does not support 'embed' request",
                                  fakes.TritonError.INTERNAL)
        return fakes.ResponseIterator([fakes.InferenceResponse([], error)])

    model = stub(failing)
    request = fakes.Request(body())
    model.execute(request)
    [error] = request.sender.errors()
    assert error.code() == fakes.TritonError.INTERNAL and "does not support 'embed' request" in error.message()
    assert [flags for _, flags in request.sender.responses] == [fakes.FINAL]


# ---- the gateway ---------------------------------------------------------------------------------


def test_the_gateway_forwards_embeddings_whole(monkeypatch):
    wire = FakeWire()
    with TestClient(create_app(wire=wire, transport=triton_transport())) as client:
        answer = client.post("/v1/embeddings", content=body(stream=True))
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    assert wire.calls == [("openai_embeddings", body(stream=True), False)]
    assert parser().parse_args([]).embeddings_model == "openai_embeddings"
    assert parser().parse_args(["--embeddings-model", "e"]).embeddings_model == "e"


def test_the_gateway_keeps_a_refusals_status():
    wire = FakeWire()
    with TestClient(create_app(wire=wire, transport=triton_transport())) as client:
        answer = client.post("/v1/embeddings", content=json.dumps({"model": "nope", "input": "x", "refuse": True}))
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "model_not_found"


def test_every_field_of_openais_and_vllms_requests_is_honoured_or_refused():
    """A field either schema knows is a field of ours, refused by name, or one that changes no vector."""
    from openai.types import EmbeddingCreateParams
    from vllm.entrypoints.pooling.embed.protocol import EmbeddingCompletionRequest

    from tritonchat.protocol.embeddings import KNOWN, EmbeddingRequest
    from tritonchat.protocol.known import IGNORED

    known = set(EmbeddingCompletionRequest.model_fields) | set(EmbeddingCreateParams.__annotations__)
    ours = set(EmbeddingRequest.model_fields) | set(KNOWN) | IGNORED
    assert known - ours == set()


def test_make_serve_serves_embeddings_only_with_an_embedding_model(tmp_path, tiny_model, tiny_embedding_model):
    from harness.serve import EMBEDDING_TARGET, parser, prepare

    def args(*extra):
        return parser().parse_args(["--model", str(tiny_model), "--repository", str(tmp_path / "r"), *extra])

    repo, _, _ = prepare(args())
    assert not (repo / "openai_embeddings").exists() and (repo / "openai_responses").is_dir()
    repo, _, _ = prepare(args("--embedding-model", str(tiny_embedding_model), "--http-port", "9100"))
    engine = json.loads((repo / EMBEDDING_TARGET / "1" / "model.json").read_text())
    assert engine["model"] == str(tiny_embedding_model) and engine["served_model_name"] == "tiny-embed"
    assert (engine["runner"], engine["convert"], engine["dtype"]) == ("pooling", "embed", "float32")
    config = (repo / "openai_embeddings" / "config.pbtxt").read_text()
    assert f'key: "target_model", value: {{ string_value: "{EMBEDDING_TARGET}" }}' in config
    assert 'key: "http_url", value: { string_value: "localhost:9100" }' in config
    assert 'key: "served_model_name", value: { string_value: "tiny-embed" }' in config  # the gateway's /v1/models
    with pytest.raises(SystemExit, match="no config.json"):
        prepare(args("--embedding-model", str(tmp_path)))
