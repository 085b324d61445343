"""`openai_chat` in a real tritonserver, against scripted generation models.

The scripted models produce exactly what the test asks for, so these tests can check the
exact text, layout, finish reasons, usage, errors, concurrency and disconnects. Most run
over every route (fixture `scripted`): the vLLM interface over gRPC and BLS, NVIDIA's
`ensemble` interface (request format `trtllm`) and the `tensorrt_llm` interface (request
format `tensorrt_llm`, over gRPC and BLS); those that read the vLLM request itself use
`vllm_scripted` (their TensorRT-LLM counterparts are in test_trtllm_chat.py).
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.helpers import ChatClient, GrpcChatClient, script, user

pytestmark = [
    pytest.mark.integration,
    pytest.mark.models(
        "chat_scripted", "chat_scripted_2510", "chat_scripted_2510_key", "chat_scripted_cancel",
    ),
]



def check_stream_layout(chunks: list[dict], *, include_usage: bool = False) -> None:
    """OpenAI's layout: role first, then content, exactly one finish_reason, then (maybe) usage."""
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    assert len({c.id for c in parsed}) == 1
    assert {c.object for c in parsed} == {"chat.completion.chunk"}
    choice_chunks = [c for c in chunks if c["choices"]]
    first = choice_chunks[0]["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": ""}
    assert all("role" not in c["choices"][0]["delta"] for c in choice_chunks[1:])
    finishing = [i for i, c in enumerate(choice_chunks) if c["choices"][0]["finish_reason"] is not None]
    assert finishing == [len(choice_chunks) - 1], "exactly one chunk, the last, carries finish_reason"
    assert choice_chunks[-1]["choices"][0]["delta"] == {}
    if include_usage:
        assert all(c["usage"] is None for c in choice_chunks)
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
        assert len(chunks) == len(choice_chunks) + 1
    else:
        assert all("usage" not in c for c in chunks)


def test_non_streaming_completion(scripted, expect):
    chunks = ["Hello", ", ", "world"]
    request = user(script(chunks=chunks, prompt_tokens=7))
    status, body = scripted.create(request)
    assert status == 200
    completion = ChatCompletion.model_validate(body)
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "scripted"
    assert completion.system_fingerprint
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content == "Hello, world"
    assert completion.choices[0].finish_reason == "stop"
    prompt, generated = expect.prompt_tokens(request["messages"], 7), expect.completion_tokens(chunks)
    assert completion.usage.model_dump(exclude_none=True) == {
        "prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}
    assert list(body) == ["id", "object", "created", "model", "system_fingerprint", "choices", "usage"]


def test_streaming_layout_and_text(scripted, expect):
    chunks = ["Hel", "lo", " ", "wörld", " 🎉"]
    result = scripted.stream({**user(script(chunks=chunks, interval_ms=5)), "stream": True})
    assert result.status == 200 and result.error is None
    check_stream_layout(result.chunks)
    assert result.content == expect.streamed_text(chunks)
    assert result.chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_stream_interval_merges_outputs_and_keeps_the_text(scripted, expect):
    """vLLM's `stream_interval`: the first output at once, then chunks of at least 3 tokens;
    the text and the layout are those of the unmerged stream. (The second output comes 300 ms
    after the first: outputs that are already waiting together when a send ends are merged
    whatever the interval, which on a busy machine could merge the first two.)"""
    chunks = [f"w{i} " for i in range(10)]
    request = {**user(script(chunks=chunks, interval_ms=3, pause_after_first_ms=300)), "stream": True,
               "stream_options": {"include_usage": True}}
    plain = scripted.stream(request)
    merged = scripted.stream({**request, "stream_interval": 3})
    assert merged.status == 200 and merged.error is None
    check_stream_layout(merged.chunks, include_usage=True)
    assert merged.content == plain.content == expect.streamed_text(chunks)
    assert merged.chunks[-1]["usage"] == plain.chunks[-1]["usage"]
    merged_texts, plain_texts = content_pieces(merged.chunks), content_pieces(plain.chunks)
    assert expect.streamed_text(chunks[:1]).startswith(merged_texts[0]), "the first output is not held back"
    assert len(merged_texts) < len(plain_texts) or len(plain_texts) <= 4
    tokens = expect.completion_tokens(chunks)  # one output per token at most
    assert 2 <= len(merged_texts) <= 1 + -(-(tokens - 1) // 3)


def content_pieces(chunks: list[dict]) -> list[str]:
    return [c["choices"][0]["delta"]["content"] for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]


def test_stream_matches_non_stream(scripted):
    request = user(script(chunks=["a", "b", "c"], prompt_tokens=4))
    _, completion = scripted.create(request)
    streamed = scripted.stream({**request, "stream": True, "stream_options": {"include_usage": True}})
    check_stream_layout(streamed.chunks, include_usage=True)
    assert streamed.content == completion["choices"][0]["message"]["content"]
    assert streamed.chunks[-1]["usage"] == completion["usage"]


def test_finish_reason_length(scripted):
    request = {**user(script(chunks=["x", "y"], finish_reason="length")), "max_tokens": 2}
    _, body = scripted.create(request)
    assert body["choices"][0]["finish_reason"] == "length"
    result = scripted.stream({**request, "stream": True})
    assert result.chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_request_id_becomes_completion_id(scripted):
    _, body = scripted.create(user("hi"), request_id="my-request-42")
    assert body["id"] == "chatcmpl-my-request-42"
    result = scripted.stream({**user("hi"), "stream": True}, request_id="abc")
    assert {c["id"] for c in result.chunks} == {"chatcmpl-abc"}


def test_model_name(scripted):
    status, body = scripted.create({**user("hi"), "model": "scripted"})
    assert status == 200 and body["model"] == "scripted"
    status, body = scripted.create({**user("hi"), "model": "gpt-4o"})
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["code"] == "model_not_found"
    assert "gpt-4o" in body["error"]["message"]


def test_generation_request_sent_to_the_backend(vllm_scripted, transport):
    request = {
        **user(script(echo_request=True)),
        "max_completion_tokens": 50,
        "max_tokens": 10,
        "temperature": 0.3,
        "top_p": 0.9,
        "seed": 7,
        "stop": "END",
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
    }
    _, body = vllm_scripted.create(request)
    seen = json.loads(body["choices"][0]["message"]["content"])
    assert seen["sampling_parameters"] == {
        "max_tokens": 50,
        "temperature": 0.3,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["END"],
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
    }
    inputs = seen["inputs"]
    assert inputs["stream"] == [False]
    assert inputs["exclude_input_in_output"] == [True]
    for flag in ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens"):
        assert inputs[flag] == [True]
    wanted = ["finish_reason", "num_input_tokens", "num_output_tokens", "text_output"]
    if transport == "http":
        # The generate extension names no outputs: the model is asked for all of them.
        assert set(wanted) < set(seen["requested_outputs"])
    else:
        assert seen["requested_outputs"] == wanted


def test_prompt_is_the_models_chat_template(vllm_scripted, tiny_model):
    from transformers import AutoTokenizer

    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": script(echo_request=True)}]},
    ]
    _, body = vllm_scripted.create({"messages": messages})
    prompt = json.loads(body["choices"][0]["message"]["content"])["inputs"]["text_input"][0]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    expected = tokenizer.apply_chat_template(
        [messages[0], {"role": "user", "content": "part one\n" + script(echo_request=True)}],
        add_generation_prompt=True,
        tokenize=False,
    )
    # The template writes BOS and the engine's tokenizer adds it again: it is sent once.
    assert expected.startswith(tokenizer.bos_token)
    assert prompt == expected[len(tokenizer.bos_token) :]


def test_default_max_tokens_is_what_fits(vllm_scripted, tiny_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    _, body = vllm_scripted.create(user(script(echo_request=True)))
    seen = json.loads(body["choices"][0]["message"]["content"])
    prompt_tokens = len(tokenizer(seen["inputs"]["text_input"][0]).input_ids)
    assert seen["sampling_parameters"]["max_tokens"] == 2048 - prompt_tokens


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ("{not json", None, "not valid JSON"),
        ("[1, 2]", None, "JSON object"),
        ("{}", "messages", "required"),
        ('{"messages": []}', "messages", "at least 1"),
        ('{"messages": "hi"}', "messages", "valid list"),
        ('{"messages": [{"role": "robot", "content": "hi"}]}', "messages[0]", "robot"),
        ('{"messages": [{"role": "user", "content": 5}]}', "messages[0].content", "valid string"),
        ('{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}', "temperature", "valid number"),
        ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "max_tokens", "greater than or equal to 1"),
        ('{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "stream", "valid boolean"),
        ('{"messages": [{"role": "tool", "content": "x"}]}', "messages[0].tool_call_id", "required"),
    ],
)
def test_bad_requests_are_400_naming_the_field(scripted, body, param, fragment):
    for stream in (False, True):
        result = scripted.stream(body) if stream else None
        status, error = (result.status, result.error) if stream else scripted.create(body)
        assert status == 400
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["param"] == param
        assert fragment in error["error"]["message"]
        if param:
            assert f"'{param}'" in error["error"]["message"]


def test_unsupported_features_are_refused(scripted):
    tools = [{"type": "function", "function": {"name": "f"}}]
    # (auto tool choice needs a tool-call parser, which chat_scripted has not)
    status, body = scripted.create({**user("hi"), "tools": tools, "tool_choice": "auto"})
    assert status == 400 and body["error"]["param"] == "tool_choice"
    status, body = scripted.create({**user("hi"), "stream_options": {"include_usage": True}})
    assert status == 400 and body["error"]["param"] == "stream_options"


def test_error_codes_over_grpc(triton, scripted):
    """The Triton error code carries the HTTP status (gRPC status with `triton_grpc_error`)."""
    client = GrpcChatClient(triton.grpc_url, scripted.model)
    cases = [
        ({"messages": []}, "INVALID_ARG"),
        ({**user("hi"), "model": "nope"}, "NOT_FOUND"),
        (user(script(error_after=0)), "INTERNAL"),
    ]
    for request, code in cases:
        payloads, error = client.stream(request, grpc_error_status=True)
        assert payloads == []
        assert error is not None
        grpc_status = {"INVALID_ARG": "INVALID_ARGUMENT", "NOT_FOUND": "NOT_FOUND", "INTERNAL": "INTERNAL"}[code]
        assert error.status() == f"StatusCode.{grpc_status}", error
        assert "error" in json.loads(error.message())


def test_grpc_streaming(triton, scripted):
    client = GrpcChatClient(triton.grpc_url, scripted.model)
    payloads, error = client.stream({**user(script(chunks=["one", " two"])), "stream": True}, request_id="g1")
    assert error is None
    check_stream_layout(payloads)
    assert "".join(p["choices"][0]["delta"].get("content", "") for p in payloads) == "one two"
    assert payloads[0]["id"] == "chatcmpl-g1"


def test_generation_error_before_output(scripted):
    status, body = scripted.create(user(script(error_after=0, error_message="engine exploded")))
    assert body["error"]["type"] == "server_error"
    assert "engine exploded" in body["error"]["message"]
    result = scripted.stream({**user(script(error_after=0, error_message="engine exploded")), "stream": True})
    assert result.chunks == [] and "engine exploded" in result.error["error"]["message"]


def test_generation_error_mid_stream_ends_the_stream(scripted, server_log):
    started = time.monotonic()
    result = scripted.stream({**user(script(chunks=["a", "b", "c", "d"], error_after=2, error_message="engine fell over")),
                              "stream": True})
    assert time.monotonic() - started < 15
    assert result.status == 200
    assert result.content == "ab"
    assert result.error is not None and result.error["error"]["type"] == "server_error"
    assert all(c["choices"][0]["finish_reason"] is None for c in result.chunks)
    if scripted.route.transport in ("http", "grpc"):
        assert "engine fell over" in result.error["error"]["message"]
    else:
        # Triton 2.51's BLS drops an error sent after the first response; the stream is
        # ended by idle_timeout_s (3 s here) instead of hanging.
        assert result.error["error"]["code"] == "service_unavailable"
    # Whatever the model does after its error (ensemble: a flag-only FINAL), the server lives.
    time.sleep(0.3)
    assert scripted.create(user("still there?"))[0] == 200
    assert "Signal (11)" not in server_log.read_text(errors="replace")


def test_silent_generation_model_is_abandoned(scripted):
    """chat_scripted is configured with idle_timeout_s=3."""
    started = time.monotonic()
    result = scripted.stream({**user(script(chunks=["a", "b"], hang_after=1, hang_s=20)), "stream": True})
    assert 2.5 < time.monotonic() - started < 10
    assert result.content == "a"
    assert result.error["error"]["code"] == "service_unavailable"


def stream_concurrently(client, request: dict, count: int) -> list:
    """`count` streams of `request` at once, each in its own thread; their results (None where a
    thread failed)."""
    results = [None] * count

    def run(i):
        results[i] = client.stream(request)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_streams_run_in_parallel(scripted):
    """16 streams of 10 chunks 100 ms apart (1 s each) finish in about the time of one. Over
    BLS an instance reads one stream at a time (the stub's deadlock, see triton/bls.py): 4
    streams take about 4 s there and all come out whole."""
    bls = scripted.route.transport == "bls"
    count = 4 if bls else 16
    request = {**user(script(chunks=[f"{i} " for i in range(10)], interval_ms=100)), "stream": True}
    started = time.monotonic()
    results = stream_concurrently(scripted, request, count)
    elapsed = time.monotonic() - started
    assert all(r.content == "".join(f"{i} " for i in range(10)) for r in results)
    if bls:
        assert elapsed > 3.5, f"4 BLS streams of 1 s took {elapsed:.1f} s: they ran at once"
    else:
        assert elapsed < 4.0, f"16 concurrent 1-second streams took {elapsed:.1f} s (serial would be 16 s)"


def test_late_responses_of_an_abandoned_stream_do_not_harm_new_streams(scripted, server_log):
    """A stream abandoned at the idle timeout gets the rest of its responses while 16 new streams
    run. Over BLS, Triton 2.51's stub crashed here when a stream's iterator was dropped early or
    destroyed by the stub's own thread (see `_RetiredIterators`)."""
    abandoned = scripted.stream({**user(script(chunks=["a", "b", "c"], hang_after=1, hang_s=4)), "stream": True})
    assert abandoned.error["error"]["code"] == "service_unavailable"
    request = {**user(script(chunks=[f"{i} " for i in range(10)], interval_ms=100)), "stream": True}
    for _round in range(2):
        results = stream_concurrently(scripted, request, 4 if scripted.route.transport == "bls" else 16)
        assert all(r is not None and r.content == "".join(f"{i} " for i in range(10)) for r in results)
    assert scripted.create(user("still there?"))[0] == 200
    assert "Signal (11)" not in server_log.read_text(errors="replace")


def drop_after_three_chunks(triton, model: str, request_id: str, count: int) -> None:
    request = {**user(script(repeat={"text": "x", "count": count}, interval_ms=20)), "stream": True}
    body = {"id": request_id, "request": json.dumps(request)}
    url = f"http://{triton.http_url}/v2/models/{model}/generate_stream"
    with requests.post(url, json=body, stream=True, timeout=30) as r:
        received = 0
        for line in r.iter_lines():
            if line.startswith(b"data: "):
                received += 1
                if received == 3:
                    break
    # The connection is closed now.


def wait_for_markers(server_log, markers: list[str], timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(m in server_log.read_text(errors="replace") for m in markers):
        time.sleep(0.1)
    return server_log.read_text(errors="replace")


def test_client_disconnect_stops_the_stream(triton, scripted, server_log):
    """openai_chat stops at once. The generation it started is cancelled over HTTP (closing the
    connection), and over BLS where the release can (25.04 and later); over gRPC it runs to its
    end, read and discarded, unless `grpc_cancel` is set (see test_disconnects.py for why)."""
    route = scripted.route
    request_id = f"disconnect-{route}-{time.monotonic_ns()}"
    drop_after_three_chunks(triton, scripted.model, request_id, count=60)
    markers = [f"chatcmpl-{request_id}: The request was cancelled by the client"]
    log_text = wait_for_markers(server_log, markers)
    for marker in markers:
        assert marker in log_text
    time.sleep(1.5)  # the 60 chunks (1.2 s) have ended by now, one way or the other
    cancelled = f"{route.target}: request '{request_id}' cancelled after" in server_log.read_text(errors="replace")
    assert cancelled == (route.transport == "http" or (route.transport == "bls" and triton.version >= (2, 57)))
    # The model keeps serving.
    status, _ = scripted.create(user("still there?"))
    assert status == 200


def test_grpc_cancel_true_cancels_the_generation(triton, server_log):
    """`grpc_cancel: true` cancels the gRPC call (for a release known to survive it)."""
    request_id = f"disconnect-forced-{time.monotonic_ns()}"
    drop_after_three_chunks(triton, "chat_scripted_cancel", request_id, count=400)
    markers = [f"chatcmpl-{request_id}: The request was cancelled by the client",
               f"scripted_vllm: request '{request_id}' cancelled after"]
    log_text = wait_for_markers(server_log, markers)
    for marker in markers:
        assert marker in log_text


def _structured_request(text: str) -> dict:
    return user(text, max_tokens=2000, response_format={"type": "json_object"})


def test_the_structured_outputs_key_follows_the_vllm_backend_release(triton):
    """The key for constrained generation is learnt from the target: `structured_outputs` for
    the 25.11 interface (`embedding_request` present); for the 25.01-25.10 interface on this
    2.51 server no release with constrained generation matches, so it is refused with a 400
    rather than failing in the backend; the parameter names the key where the server cannot."""
    newer = ChatClient(triton.http_url, "chat_scripted")
    _, body = newer.create(_structured_request(script(echo_request=True)))
    seen = json.loads(body["choices"][0]["message"]["content"])["sampling_parameters"]
    assert json.loads(seen["structured_outputs"]) == {"json_object": True} and "guided_decoding" not in seen

    older = ChatClient(triton.http_url, "chat_scripted_2510")
    status, body = older.create(_structured_request("Hi"))
    assert status == 400 and body["error"]["param"] == "response_format", body
    assert "25.01" in body["error"]["message"]
    status, body = older.create(user("Hi"))
    assert status == 200, body

    named = ChatClient(triton.http_url, "chat_scripted_2510_key")
    _, body = named.create(_structured_request(script(echo_request=True)))
    seen = json.loads(body["choices"][0]["message"]["content"])["sampling_parameters"]
    assert json.loads(seen["guided_decoding"]) == {"json_object": True} and "structured_outputs" not in seen


def test_text_output_carries_each_responses_new_text(triton):
    """With `text_output: true`, every response also has the plain new text (for benchmark
    tools that read text); role-only and usage chunks have "". Off by default."""
    chunks = ["Hel", "lo", " wörld"]
    request = {**user(script(chunks=chunks)), "stream": True, "stream_options": {"include_usage": True}}
    url = f"http://{triton.http_url}/v2/models/chat_text_output/generate_stream"
    with requests.post(url, json={"request": json.dumps(request)}, stream=True, timeout=30) as r:
        events = [json.loads(line[len(b"data: "):]) for line in r.iter_lines() if line.startswith(b"data: ")]
    texts = [event["text_output"] for event in events]
    # Deltas may merge under load; each event's text is its own chunk's content.
    assert texts[0] == "" and texts[-1] == "" and "".join(texts) == "".join(chunks)  # role, usage: ""
    for event in events:
        choices = json.loads(event["response"])["choices"]
        assert event["text_output"] == "".join(c["delta"].get("content") or "" for c in choices)
    whole = requests.post(f"http://{triton.http_url}/v2/models/chat_text_output/generate",
                          json={"request": json.dumps(user(script(chunks=chunks)))}, timeout=30).json()
    assert whole["text_output"] == "Hello wörld"
    plain = requests.post(f"http://{triton.http_url}/v2/models/chat_scripted/generate",
                          json={"request": json.dumps(user("Hi"))}, timeout=30).json()
    assert "text_output" not in plain
    config = requests.get(f"http://{triton.http_url}/v2/models/chat_text_output/config", timeout=10).json()
    assert [o["name"] for o in config["output"]] == ["response", "text_output"]
