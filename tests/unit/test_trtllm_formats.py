"""TensorRT-LLM request formats: tensors with the batch dimension, stop strings, incremental
detokenization and token accounting."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tritonchat.formats import FormatOptions, GenerationRequest, TensorRtLlmFormat, EnsembleFormat
from tritonchat.formats.detokenize import IncrementalDetokenizer, StopStrings
from tritonchat.formats.tensorrt_llm import stop_words_list
from tritonchat.errors import BadRequestError, NotFoundError


def request(**kw) -> GenerationRequest:
    return GenerationRequest(**{"prompt": "Hello", "prompt_tokens": 2, "max_tokens": 8, "stream": True, **kw})


def test_ensemble_inputs():
    fmt = EnsembleFormat(FormatOptions(seed_input="random_seed", min_tokens_input="min_length", lora_task_ids={"sql": 3}))
    req = request(sampling={"temperature": 0.5, "top_p": 0.9, "top_k": 4, "seed": -1, "min_tokens": 2,
                            "stop": ["END", "ÖL"], "presence_penalty": 0.1}, lora_name="sql",
                  structured={"json": {"type": "object"}})
    inputs = fmt.inputs(req)
    assert inputs["text_input"].shape == (1, 1) and inputs["text_input"][0, 0] == b"Hello"
    assert inputs["max_tokens"].dtype == np.int32 and inputs["max_tokens"][0, 0] == 8
    assert inputs["stream"].dtype == np.bool_ and inputs["stream"].shape == (1, 1)
    assert inputs["temperature"].dtype == np.float32 and inputs["top_k"].dtype == np.int32
    assert inputs["random_seed"].dtype == np.uint64 and inputs["random_seed"][0, 0] == 2**64 - 1
    assert inputs["min_length"][0, 0] == 2
    assert inputs["stop_words"].shape == (1, 2) and inputs["stop_words"][0, 1] == "ÖL".encode()
    assert inputs["lora_task_id"].dtype == np.uint64 and inputs["lora_task_id"][0, 0] == 3
    assert inputs["guided_decoding_guide_type"][0, 0] == b"json_schema"
    assert json.loads(inputs["guided_decoding_guide"][0, 0]) == {"type": "object"}
    assert inputs["exclude_input_in_output"][0, 0]
    assert fmt.requested_outputs(req) == ["text_output", "num_input_tokens", "num_output_tokens"]
    assert all(value.ndim == 2 and value.shape[0] == 1 for value in inputs.values())


@pytest.mark.parametrize("name", ["trtllm", "tensorrt_llm"])
def test_openai_sampling_defaults_replace_tensorrt_llms(name, tokenizer):
    """TensorRT-LLM's absent top-k and top-p mean greedy and its absent seed was 0 for every
    request: every request carries top_p (1.0 unless set) and a seed (drawn unless set)."""
    fmt = EnsembleFormat() if name == "trtllm" else TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer))
    top_p = fmt.top_p_input
    first, second = fmt.inputs(request(sampling={"temperature": 0.7})), fmt.inputs(request(sampling={"temperature": 0.7}))
    assert first[top_p].dtype == np.float32 and first[top_p].reshape(-1)[0] == 1.0
    assert first["seed"].dtype == np.uint64 and first["seed"].reshape(-1)[0] != second["seed"].reshape(-1)[0]
    chosen = fmt.inputs(request(sampling={"top_p": 0.5, "top_k": 3, "seed": 7}))
    assert chosen[top_p].reshape(-1)[0] == 0.5 and chosen[fmt.top_k_input].reshape(-1)[0] == 3
    assert chosen["seed"].reshape(-1)[0] == 7


@pytest.mark.parametrize(("sampling", "param"), [({"min_p": 0.1}, "min_p"), ({"logit_bias": {1: 2}}, "logit_bias"),
                                                  ({"stop_token_ids": [3]}, "stop_token_ids")])
def test_ensemble_refuses_what_it_cannot_do(sampling, param):
    with pytest.raises(BadRequestError) as info:
        EnsembleFormat().check(request(sampling=sampling))
    assert info.value.param == param
    with pytest.raises(BadRequestError):
        EnsembleFormat().check(request(logprobs=0))
    with pytest.raises(NotFoundError):
        EnsembleFormat().check(request(lora_name="unknown"))


def test_ensemble_decoder_cuts_stop_strings_and_infers_the_reason():
    fmt = EnsembleFormat()
    decoder = fmt.decoder(request(sampling={"stop": ["STOP"]}))
    texts = []
    for piece in ["Hel", "lo S", "TO", "P and more"]:
        out = decoder.decode({"text_output": np.array([[piece.encode()]], dtype=object),
                              "num_output_tokens": np.array([[1]], dtype=np.int32)})
        texts.append(out.text)
    assert "".join(texts) == "Hello " and decoder.finished
    assert decoder.end().finish_reason == "stop"
    budget = fmt.decoder(request(max_tokens=2))
    for _ in range(2):
        budget.decode({"text_output": np.array([[b"x"]], dtype=object), "num_output_tokens": np.array([[1]], dtype=np.int32)})
    assert budget.end().finish_reason == "length"


def test_ensemble_without_token_counts(tokenizer):
    fmt = EnsembleFormat(FormatOptions(token_count_outputs=False, tokenizer=tokenizer))
    assert fmt.requested_outputs(request()) == ["text_output"]
    assert "return_num_output_tokens" not in fmt.inputs(request())
    decoder = fmt.decoder(request(stream=False))
    out = decoder.decode({"text_output": np.array([[b" Hello world"]], dtype=object)})
    assert out.completion_tokens == len(tokenizer(" Hello world", add_special_tokens=False).input_ids)
    streamed = fmt.decoder(request(stream=True))
    counts = [streamed.decode({"text_output": np.array([[piece]], dtype=object)}).completion_tokens
              for piece in (b" Hello", b" world", b"")]
    assert counts == [1, 1, 0]  # the empty response at end_id holds no token


def test_direct_inputs(tokenizer):
    fmt = TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer))
    req = request(prompt="<|im_start|>user\\nhi", sampling={"top_k": 5, "top_p": 0.5, "stop": ["ab"], "stop_token_ids": [7]})
    inputs = fmt.inputs(req)
    ids = tokenizer(req.prompt).input_ids
    assert inputs["input_ids"].dtype == np.int32 and inputs["input_ids"].tolist() == [ids]
    assert inputs["input_lengths"].tolist() == [[len(ids)]]
    assert inputs["request_output_len"].tolist() == [[8]]
    assert inputs["streaming"].tolist() == [[True]]
    assert inputs["runtime_top_k"].tolist() == [[5]] and inputs["runtime_top_p"].dtype == np.float32
    assert inputs["end_id"].tolist() == [[tokenizer.eos_token_id]]
    stop_ids = tokenizer("ab", add_special_tokens=False).input_ids
    assert inputs["stop_words_list"].tolist() == stop_words_list([stop_ids, [7]]).tolist()
    assert fmt.requested_outputs(req) == ["output_ids", "sequence_length"]


def test_stop_words_list_layout():
    assert stop_words_list([[1, 2], [3]]).tolist() == [[[1, 2, 3], [2, 3, -1]]]


def test_direct_decoder_is_exact_token_by_token(tokenizer):
    text = "  leading spaces, wörld 中文 🎉 done"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    fmt = TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer))
    decoder = fmt.decoder(request(max_tokens=100))
    pieces = []
    for token in ids:
        out = decoder.decode({"output_ids": np.array([[[token]]], dtype=np.int32), "sequence_length": np.array([[1]], dtype=np.int32)})
        assert "\ufffd" not in out.text
        pieces.append(out.text)
    end = decoder.end()
    assert "".join(pieces) + end.text == text
    assert decoder.completion_tokens == len(ids) and end.finish_reason == "stop"


def test_direct_decoder_stop_token_and_logprobs(tokenizer):
    ids = tokenizer(" one two three", add_special_tokens=False).input_ids
    fmt = TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer))
    decoder = fmt.decoder(request(max_tokens=100, logprobs=0, sampling={"stop_token_ids": [ids[-1]]}))
    out = decoder.decode({"output_ids": np.array([[ids]], dtype=np.int32),
                          "output_log_probs": np.array([[[-0.5] * len(ids)]], dtype=np.float32)})
    assert out.text == tokenizer.decode(ids[:-1]) and decoder.finished
    assert [t.logprob for t in out.logprobs] == [-0.5] * (len(ids) - 1)
    with pytest.raises(BadRequestError):
        fmt.check(request(logprobs=2))


def test_incremental_detokenizer_matches_whole_decode(tokenizer):
    text = "Ünïcödé ✓ mixed 混合 text"
    ids = tokenizer(text, add_special_tokens=False).input_ids
    detok = IncrementalDetokenizer(tokenizer)
    assert "".join(detok.push([i]) for i in ids) + detok.flush() == tokenizer.decode(ids)


@pytest.mark.parametrize("pieces", [["ab", "cSTO", "Pxyz"], ["abcS", "T", "O", "P"], ["abc"]])
def test_stop_strings(pieces):
    stops = StopStrings(["STOP"])
    out = "".join(stops.push(p) for p in pieces) + stops.flush()
    assert out == "abc"
    assert stops.matched == ("STOP" in "".join(pieces))


def test_direct_inputs_reuse_the_prompts_token_ids(tokenizer):
    """The renderer already tokenized the prompt to count it; those ids are sent as they are."""
    fmt = TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer))
    ids = tuple(tokenizer("Hello there").input_ids)
    assert fmt.inputs(request(prompt="Hello there", prompt_token_ids=ids))["input_ids"].tolist() == [list(ids)]
    assert fmt.inputs(request(prompt="Hello there"))["input_ids"].tolist() == [list(ids)]


def test_every_turn_ending_id_stops_tensorrt_llm(tokenizer):
    """TensorRT-LLM takes one end_id; the other EOS ids of generation_config.json (Llama 3's
    <|eot_id|> beside <|end_of_text|>) go as stop words and are cut from the output."""
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    fmt = TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer, end_id=0, eos_token_ids=(0, im_end)))
    req = request(sampling={"stop_token_ids": [7]})
    assert stop_words_list_words(fmt.inputs(req)["stop_words_list"]) == [[7], [im_end]]
    decoder = fmt.decoder(req)
    ids = tokenizer.encode("Done.", add_special_tokens=False) + [im_end]
    out = decoder.decode({"output_ids": np.array([[ids]], dtype=np.int32),
                          "sequence_length": np.array([[len(ids)]], dtype=np.int32)})
    assert out.text == "Done." and out.finish_reason == "stop"
    same = TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer, eos_token_ids=(im_end,)))  # end_id is the EOS
    assert "stop_words_list" not in same.inputs(request())


def test_every_turn_ending_id_stops_the_ensemble(tokenizer):
    fmt = EnsembleFormat(FormatOptions(tokenizer=tokenizer, end_id=0, eos_token_ids=(0, 3)))
    req = request(sampling={"stop": ["END"]})
    assert fmt.inputs(req)["stop_words"].tolist() == [[b"END", tokenizer.decode([3]).encode()]]
    decoder = fmt.decoder(req)
    texts = [decoder.decode({"text_output": np.array([[piece.encode()]], dtype=object)}).text
             for piece in ["Done", ".", "<|im_end|>"]]
    assert "".join(texts) + decoder.end().text == "Done." and decoder.finished


def stop_words_list_words(array: np.ndarray) -> list[list[int]]:
    flat, offsets = array[0]
    words, start = [], 0
    for end in offsets:
        if end < 0:
            break
        words.append([int(t) for t in flat[start:end]])
        start = end
    return words


def test_tensorrt_llm_keeps_special_tokens_when_a_parser_needs_them(tokenizer):
    """The Mistral parser asks for skip_special_tokens false; the ids are detokenized here, so
    this format honours it (the ensemble's postprocessing cannot, see Service)."""
    fmt = TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer))
    special = tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
    ids = [special] + tokenizer.encode("Hi", add_special_tokens=False)
    outputs = {"output_ids": np.array([[ids]], dtype=np.int32), "sequence_length": np.array([[len(ids)]], dtype=np.int32)}
    kept = fmt.decoder(request(sampling={"skip_special_tokens": False}))
    assert kept.decode(outputs).text + kept.end().text == "<|begin_of_text|>Hi"
    dropped = fmt.decoder(request())
    assert dropped.decode(outputs).text + dropped.end().text == "Hi"
