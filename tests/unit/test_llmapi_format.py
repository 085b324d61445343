"""The `llmapi` request format (TensorRT-LLM's LLM API Triton model): tensors without a batch
dimension, the whole-text-so-far responses turned into deltas, stop strings, token counts."""

from __future__ import annotations

import numpy as np
import pytest

from tritonchat.errors import BadRequestError, CancelledError, NotFoundError
from tritonchat.formats import FormatOptions, GenerationRequest, LlmApiFormat


def request(**kw) -> GenerationRequest:
    return GenerationRequest(**{"prompt": "Hello", "prompt_tokens": 2, "max_tokens": 8, "stream": True, **kw})


def fmt_for(tokenizer, **options) -> LlmApiFormat:
    return LlmApiFormat(FormatOptions(tokenizer=tokenizer, **options))


def response(text: str, finish: str = "None", stop_reason: str = "None") -> dict:
    return {
        "text_output": np.array([text.encode()], dtype=np.object_),
        "finish_reason": np.array([finish.encode()], dtype=np.object_),
        "stop_reason": np.array([stop_reason.encode()], dtype=np.object_),
    }


def test_inputs(tokenizer):
    fmt = fmt_for(tokenizer, lora_paths={"sql": "/adapters/sql", "chat": "/adapters/chat"})
    inputs = fmt.inputs(request(sampling={"temperature": 0.5, "top_k": 4, "seed": -1, "stop": ["END"],
                                          "presence_penalty": 0.1, "frequency_penalty": 0.2}, lora_name="sql"))
    assert inputs["text_input"].shape == (1,) and inputs["text_input"][0] == b"Hello"
    assert inputs["streaming"].dtype == np.bool_ and inputs["streaming"].tolist() == [True]
    assert inputs["sampling_param_max_tokens"].dtype == np.int32 and inputs["sampling_param_max_tokens"][0] == 8
    assert inputs["sampling_param_temperature"].dtype == np.float32
    assert inputs["sampling_param_top_k"].dtype == np.int32 and inputs["sampling_param_top_k"][0] == 4
    assert inputs["sampling_param_top_p"][0] == 1.0  # OpenAI's default; absent would mean greedy
    assert inputs["sampling_param_seed"].dtype == np.uint64 and inputs["sampling_param_seed"][0] == 2**64 - 1
    assert inputs["sampling_param_stop"].tolist() == [b"END"]
    assert inputs["sampling_param_exclude_input_from_output"].tolist() == [True]  # the model's default is false
    assert inputs["return_finish_reason"].tolist() == [True] and inputs["return_stop_reason"].tolist() == [True]
    assert inputs["lora_name"][0] == b"sql" and inputs["lora_path"][0] == b"/adapters/sql"
    assert inputs["lora_id"].dtype == np.uint64 and inputs["lora_id"][0] == 2  # sorted: chat, sql
    assert all(value.ndim == 1 for value in inputs.values())
    assert fmt.requested_outputs(request()) == ["text_output", "finish_reason", "stop_reason"]


def test_seed_is_drawn_per_request_and_streaming_follows_the_target(tokenizer):
    fmt = fmt_for(tokenizer)
    first, second = fmt.inputs(request()), fmt.inputs(request())
    assert first["sampling_param_seed"][0] != second["sampling_param_seed"][0]
    sync = fmt_for(tokenizer, target_decoupled=False)
    assert sync.inputs(request())["streaming"].tolist() == [False]
    # A decoupled model streams even for a whole answer (its usage is counted per engine step).
    assert fmt.inputs(request(stream=False))["streaming"].tolist() == [True]


def test_an_older_release_gets_only_the_inputs_it_has(tokenizer):
    fmt = fmt_for(tokenizer, target_inputs=frozenset({"text_input", "streaming", "sampling_param_max_tokens",
                                                       "return_finish_reason"}))
    inputs = fmt.inputs(request())
    assert "sampling_param_seed" not in inputs and "return_stop_reason" not in inputs
    assert fmt.requested_outputs(request()) == ["text_output", "finish_reason"]
    with pytest.raises(BadRequestError) as error:
        fmt.check(request(sampling={"seed": 1}))
    assert error.value.param == "seed"


@pytest.mark.parametrize("key", ["min_p", "logit_bias", "ignore_eos", "repetition_penalty", "min_tokens",
                                 "stop_token_ids", "skip_special_tokens", "bad_words", "include_stop_str_in_output"])
def test_what_the_model_has_no_input_for_is_refused(tokenizer, key):
    with pytest.raises(BadRequestError) as error:
        fmt_for(tokenizer).check(request(sampling={key: 1}))
    assert error.value.param == key


def test_logprobs_structured_and_unknown_adapters_are_refused(tokenizer):
    fmt = fmt_for(tokenizer, lora_paths={"sql": "/a"})
    with pytest.raises(BadRequestError, match="log"):
        fmt.check(request(logprobs=0))
    with pytest.raises(BadRequestError) as error:
        fmt.check(request(structured={"json": {}}))
    assert error.value.param == "response_format"
    with pytest.raises(NotFoundError):
        fmt.check(request(lora_name="other"))
    fmt.check(request(lora_name="sql"))


def test_whole_text_so_far_becomes_deltas_and_tokens_are_counted(tokenizer):
    fmt = fmt_for(tokenizer)
    req = request()
    decoder = fmt.decoder(req)
    outs = [decoder.decode(response(t)) for t in ("Hel", "Hello", "Hello wörld")]
    assert [out.text for out in outs] == ["Hel", "lo", " wörld"]
    last = decoder.decode(response("Hello wörld", "stop"))  # the end at EOS: no new token
    assert last.text == "" and last.finish_reason == "stop"
    assert last.prompt_tokens == 2
    assert [out.completion_tokens for out in outs + [last]] == [1, 1, 1, 0]  # one engine step per response
    assert decoder.end() is None
    # A whole answer from a model that is not decoupled is counted with the tokenizer.
    whole = fmt_for(tokenizer, target_decoupled=False).decoder(request(stream=False)).decode(response("Hello wörld", "stop"))
    assert whole.completion_tokens == len(tokenizer("Hello wörld", add_special_tokens=False).input_ids)
    # A stop string or the token budget ends on a step that made a token.
    assert fmt.decoder(request(sampling={"stop": ["X"]})).decode(response("Hi", "stop", "X")).completion_tokens == 1
    assert fmt.decoder(request()).decode(response("Hi", "length")).completion_tokens == 1


def test_length_and_timeout(tokenizer):
    for reason, expected in (("length", "length"), ("timeout", "length")):
        decoder = fmt_for(tokenizer, target_decoupled=False).decoder(request(stream=False))
        out = decoder.decode(response("Hello", reason))
        assert (out.text, out.finish_reason) == ("Hello", expected)


def test_cancelled_is_an_error(tokenizer):
    decoder = fmt_for(tokenizer).decoder(request())
    with pytest.raises(CancelledError):
        decoder.decode(response("Hel", "cancelled"))


def test_a_stop_string_the_engine_matched_drops_its_streamed_beginning(tokenizer):
    """The engine removes a matched stop word's ids from the final text, but the start of a
    multi-token stop string was already streamed: it is held back here and dropped."""
    decoder = fmt_for(tokenizer).decoder(request(sampling={"stop": ["STOP"]}))
    assert decoder.decode(response("Hi ")).text == "Hi "
    assert decoder.decode(response("Hi ST")).text == ""  # could begin "STOP": held back
    last = decoder.decode(response("Hi ST", "stop", "STOP"))
    assert last.text == "" and last.finish_reason == "stop"


def test_held_back_text_that_was_no_stop_string_is_released(tokenizer):
    decoder = fmt_for(tokenizer).decoder(request(sampling={"stop": ["STOP"]}))
    assert decoder.decode(response("Hi ST")).text == "Hi "
    last = decoder.decode(response("Hi ST", "stop"))  # ended at EOS
    assert last.text == "ST" and last.finish_reason == "stop"


def test_a_stop_string_inside_a_token_is_cut_here(tokenizer):
    decoder = fmt_for(tokenizer).decoder(request(sampling={"stop": ["lo"]}))
    out = decoder.decode(response("Hello there"))
    assert out.text == "Hel" and out.finish_reason == "stop" and decoder.finished
