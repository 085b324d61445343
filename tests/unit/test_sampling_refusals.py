"""What vLLM refuses, `openai_chat` refuses first, with a 400 naming the field.

Triton's vLLM backend builds `SamplingParams` from the JSON we send; when vLLM refuses a
value there, the client only ever sees "Error generating stream: 'NoneType' object has no
attribute 'lora_name'" (the cause goes to the server log). Values the engine refuses when the
request arrives (a token id outside the vocabulary, more log probabilities than
`max_logprobs`, a bad word without tokens) fail with a message, but as an error of the
generation model, not a 400. So every such value must be refused here first.

The test is differential: a grid of boundary and bad values of every sampling field goes
through the project's own path (parse, policy, plan, the `vllm` request format), and what is
accepted goes on to real vLLM exactly as Triton's backend hands it over: the local stand-in's
`build_sampling_params` (harness/local_vllm_backend/model.py, the same casts as
vllm_backend's `TritonSamplingParams.from_dict`), then the engine's admission checks
(`InputProcessor.process_inputs` with the tiny model's configuration: `SamplingParams.verify`,
the bad-words tokenization, the prompt length) and the MessagePack encoding that carries the
request to the engine core. Whatever we accept, vLLM must accept. Whatever we refuse, vLLM
must refuse too, unless the case says why we are stricter.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import locale
import multiprocessing
import multiprocessing.spawn
import os
import queue
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings
from hypothesis import strategies as st

from tests.unit import fakes
from tritonchat.errors import BadRequestError
from tritonchat.protocol import INT64_MAX, INT64_MIN, UINT64_MAX
from tritonchat.service import ChatService, CompletionService
from tritonchat.settings import Settings

pytest.importorskip("vllm")

STANDIN = Path(__file__).resolve().parents[2] / "harness" / "local_vllm_backend" / "model.py"
NO_SAMPLING_PARAMS = "'NoneType' object has no attribute 'lora_name'"

# Why we refuse a value vLLM takes.
STRICT_TYPES = "types are strict here (the backend would cast a string or a bool, e.g. bool('false') is True)"
CONTEXT = "vLLM's own server, like OpenAI, refuses a budget past the context; the engine would stop at it"
OURS = "this server's own limit"
UNSUPPORTED = "a feature this server does not carry out (protocol/known.py)"


class Log:
    """`pb_utils.Logger` as the backend uses it."""

    def __init__(self):
        self.errors: list[str] = []

    def log_error(self, message: str) -> None:
        self.errors.append(message)

    def log_info(self, message: str) -> None:
        pass


# ---- the stand-in backend and the engine's admission -------------------------------------


def _restore_process_state():
    """The stand-in sets the locale and spawn settings at import, and vLLM's CPU platform sets
    LD_PRELOAD and more in os.environ: none of that may leak into the other tests."""
    environ, current_locale = dict(os.environ), locale.setlocale(locale.LC_ALL)
    executable, spawn_executable, argv = sys.executable, multiprocessing.spawn.get_executable(), sys.argv

    def restore():
        os.environ.clear()
        os.environ.update(environ)
        locale.setlocale(locale.LC_ALL, current_locale)
        sys.executable, sys.argv = executable, argv
        multiprocessing.set_executable(spawn_executable)

    return restore


@pytest.fixture(scope="module")
def standin():
    """harness/local_vllm_backend/model.py, imported with a stand-in `triton_python_backend_utils`."""
    restore = _restore_process_state()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(sys.modules, "triton_python_backend_utils", fakes.make_pb_utils(lambda request: None))
            spec = importlib.util.spec_from_file_location("local_vllm_backend_model", STANDIN)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        module.vllm_api()  # vLLM imported, as the backend does when it makes its engine
    finally:
        restore()
    return module


@pytest.fixture(scope="module")
def settings(tiny_model) -> Settings:
    return Settings.from_parameters({"tokenizer": str(tiny_model), "served_model_name": "tiny"}, None)


@pytest.fixture(scope="module")
def services(settings, tokenizer, tiny_model) -> dict:
    found = {"chat": ChatService(settings, tokenizer), "completion": CompletionService(settings, tokenizer)}
    vocab_size = int(json.loads((tiny_model / "config.json").read_text())["vocab_size"])
    for service in found.values():
        assert service.limits.vocab_size == vocab_size  # read from the model's config.json
    return found


@pytest.fixture(scope="module")
def engine(tiny_model, services):
    """vLLM's request admission for the tiny model, with the engine's defaults (max_logprobs 20,
    structured outputs `auto`), and the encoder of its engine-core requests."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.serial_utils import MsgpackEncoder

    restore = _restore_process_state()
    try:
        context = services["chat"].limits.context_length
        config = EngineArgs(model=str(tiny_model), max_model_len=context, enforce_eager=True).create_engine_config()
        processor = InputProcessor(config)
    finally:
        restore()
    assert processor.model_config.get_vocab_size() == services["chat"].limits.vocab_size
    return processor, MsgpackEncoder()


def vllm_refusal(standin, engine, sampling_json: str, prompt: str) -> str | None:
    """Why Triton's vLLM backend would fail this request, or None if vLLM takes it."""
    processor, encoder = engine
    log = Log()
    try:
        params, _ = standin.build_sampling_params(sampling_json, log)
    except AttributeError as error:
        assert str(error) == NO_SAMPLING_PARAMS and len(log.errors) == 1
        return f"SamplingParams: {log.errors[0]}"
    try:
        encoder.encode(processor.process_inputs("r", {"prompt": prompt}, params, ("generate",)))
    except Exception as error:  # noqa: BLE001  (whatever the engine refuses with)
        return f"engine: {type(error).__name__}: {error}"
    return None


# ---- the grid -----------------------------------------------------------------------------


def nested(levels: int) -> dict:
    """A JSON object (schema enough for vLLM) that nests objects `levels` deep, the outermost counted."""
    schema: dict = {"type": "object"}
    for _ in range(levels - 1):
        schema = {"a": schema}
    return schema


def tool(parameters: dict) -> list[dict]:
    return [{"type": "function", "function": {"name": "f", "parameters": parameters}}]


@dataclass(frozen=True)
class Case:
    fields: dict
    param: str | None = None  # None: accepted; else the param of the 400
    stricter: str | None = None  # why we refuse what vLLM takes
    kinds: tuple[str, ...] = ("chat", "completion")
    budget_offset: int | None = None  # min_tokens: the default budget plus this


def ok(kinds=("chat", "completion"), **fields) -> Case:
    return Case(fields, kinds=kinds)


def no(param: str, stricter: str | None = None, kinds=("chat", "completion"), **fields) -> Case:
    return Case(fields, param, stricter, kinds)


NAN, INF = float("nan"), float("inf")
VOCAB = 2048  # the tiny model's (checked against vLLM's count in `engine`)
WORDS = [f"w{i}" for i in range(65)]
CHAT = ("chat",)
COMPLETION = ("completion",)

GRID = [
    # temperature: [0, 2]
    ok(temperature=0), ok(temperature=1e-6), ok(temperature=2), ok(temperature=-0.0),
    no("temperature", temperature=-1e-9), no("temperature", temperature=2.0000001), no("temperature", temperature=NAN),
    no("temperature", temperature=INF), no("temperature", temperature=-INF), no("temperature", temperature=10**400),
    no("temperature", STRICT_TYPES, temperature="0.5"), no("temperature", STRICT_TYPES, temperature=True),
    # top_p: (0, 1]
    ok(top_p=1e-9), ok(top_p=1), ok(top_p=0.5),
    no("top_p", top_p=0), no("top_p", top_p=0.0), no("top_p", top_p=-0.1), no("top_p", top_p=1.0000001),
    no("top_p", top_p=NAN),
    # top_k: -1, 0 or more; what the engine's MessagePack carries
    ok(top_k=-1), ok(top_k=0), ok(top_k=1), ok(top_k=2**31), ok(top_k=UINT64_MAX),
    no("top_k", top_k=-2), no("top_k", top_k=UINT64_MAX + 1), no("top_k", STRICT_TYPES, top_k=1.0),
    no("top_k", STRICT_TYPES, top_k=1.5),
    # min_p: [0, 1]
    ok(min_p=0), ok(min_p=1), no("min_p", min_p=-0.1), no("min_p", min_p=1.1), no("min_p", min_p=NAN),
    # penalties: [-2, 2]; repetition_penalty > 0 (we also cap it at 2)
    *[case for name in ("presence_penalty", "frequency_penalty") for case in (
        ok(**{name: -2}), ok(**{name: 2}), no(name, **{name: -2.1}), no(name, **{name: 2.1}),
        no(name, **{name: NAN}), no(name, **{name: INF}))],
    ok(repetition_penalty=1e-300), ok(repetition_penalty=2),
    no("repetition_penalty", repetition_penalty=0), no("repetition_penalty", repetition_penalty=-1),
    no("repetition_penalty", repetition_penalty=NAN), no("repetition_penalty", repetition_penalty=INF),
    no("repetition_penalty", OURS + " (2, as for the other penalties)", repetition_penalty=2.5),
    # seed: int64 (choice i gets seed + i, wrapped)
    ok(seed=-1), ok(seed=INT64_MIN), ok(seed=INT64_MAX), Case({"seed": INT64_MAX, "n": 3}),
    no("seed", seed=INT64_MIN - 1), no("seed", "vLLM's own server takes int64 seeds only", seed=INT64_MAX + 1),
    no("seed", STRICT_TYPES, seed=1.5),
    # stop
    ok(stop=[]), ok(stop=" "), ok(stop=["a"] * 16), ok(stop="x" * 5000),
    ok(stop=["a"], include_stop_str_in_output=True),
    no("stop", stop=""), no("stop", stop=["a", ""]), no("stop", OURS + " (OpenAI's is 4)", stop=["a"] * 17),
    no("stop", stop=[1]),
    # token ids: within the vocabulary
    ok(stop_token_ids=[]), ok(stop_token_ids=[0, VOCAB - 1]),
    no("stop_token_ids", stop_token_ids=[-1]), no("stop_token_ids", stop_token_ids=[VOCAB]),
    no("stop_token_ids", stop_token_ids=[2**64]), no("stop_token_ids", stop_token_ids=[1.0]),
    ok(allowed_token_ids=[0]), ok(allowed_token_ids=[VOCAB - 1]),
    no("allowed_token_ids", allowed_token_ids=[]), no("allowed_token_ids", allowed_token_ids=[-1]),
    no("allowed_token_ids", allowed_token_ids=[VOCAB]),
    no("logit_bias", logit_bias={"5": 1}),  # refused by name on the vllm format
    # budgets
    ok(max_tokens=1), ok(max_tokens=2000),
    no("max_tokens", max_tokens=0), no("max_tokens", max_tokens=-1), no("max_tokens", CONTEXT, max_tokens=2048),
    no("max_tokens", max_tokens=2**64), no("max_tokens", STRICT_TYPES, max_tokens=True),
    ok(kinds=CHAT, max_completion_tokens=5, max_tokens=3000),
    no("max_completion_tokens", kinds=CHAT, max_completion_tokens=0),
    no("max_completion_tokens", CONTEXT, kinds=CHAT, max_completion_tokens=2**63),
    ok(min_tokens=0), ok(min_tokens=5, max_tokens=5), ok(kinds=CHAT, min_tokens=5, max_completion_tokens=5),
    Case({"min_tokens": 0}, budget_offset=0), Case({"min_tokens": 0}, "min_tokens", budget_offset=1),
    Case({"min_tokens": 0, "ignore_eos": True}, budget_offset=0),
    no("min_tokens", min_tokens=-1), no("min_tokens", min_tokens=6, max_tokens=5),
    no("min_tokens", kinds=CHAT, min_tokens=6, max_completion_tokens=5), no("min_tokens", min_tokens=2**64),
    # bad words: every word must have a token; at most 128 token sequences (64 words for sure)
    ok(bad_words=[]), ok(bad_words=["a"]), ok(bad_words=[" a"]), ok(bad_words=["\u200b"]), ok(bad_words=WORDS[:64]),
    ok(bad_words=["a"] * 100),
    no("bad_words", bad_words=[""]), no("bad_words", bad_words=[" "]), no("bad_words", bad_words=["a", "\n\t"]),
    no("bad_words", bad_words=WORDS),
    # flags
    ok(ignore_eos=True), ok(ignore_eos=False), ok(skip_special_tokens=False), ok(spaces_between_special_tokens=False),
    ok(include_stop_str_in_output=True),
    no("ignore_eos", STRICT_TYPES, ignore_eos=1), no("skip_special_tokens", STRICT_TYPES, skip_special_tokens="false"),
    # choices (one generation each, so `n` itself never reaches vLLM)
    ok(n=2), ok(n=2, temperature=0), no("n", n=0), no("n", OURS + " (max_n)", n=17),
    ok(kinds=COMPLETION, n=2, best_of=2), no("best_of", OURS, kinds=COMPLETION, n=2, best_of=3),
    # log probabilities: at most the engine's max_logprobs (20)
    ok(kinds=CHAT, logprobs=True), ok(kinds=CHAT, logprobs=True, top_logprobs=20),
    no("top_logprobs", kinds=CHAT, logprobs=True, top_logprobs=21),
    no("top_logprobs", kinds=CHAT, logprobs=True, top_logprobs=-1),
    ok(kinds=COMPLETION, logprobs=0), ok(kinds=COMPLETION, logprobs=5),
    no("logprobs", kinds=COMPLETION, logprobs=-1), no("logprobs", "OpenAI's limit for completions", kinds=COMPLETION,
                                                       logprobs=6),
    # vLLM extras this server refuses but at their no-op values
    ok(length_penalty=1), ok(use_beam_search=False), ok(prompt_logprobs=None),
    no("prompt_logprobs", UNSUPPORTED, prompt_logprobs=1), no("length_penalty", UNSUPPORTED, length_penalty=2),
    no("truncate_prompt_tokens", UNSUPPORTED, truncate_prompt_tokens=5),
    # constrained generation: what vLLM refuses before compiling
    ok(guided_regex="a"), ok(guided_regex=" "), ok(guided_grammar='root ::= "a"'), ok(guided_choice=["a", "a"]),
    ok(guided_json=nested(64)), ok(guided_json={"type": "object"}),
    no("guided_regex", guided_regex="a\x00"), no("guided_regex", "an empty regex is taken as no constraint here",
                                                  guided_regex=""),
    no("guided_grammar", guided_grammar=" "), no("guided_grammar", guided_grammar="\n"),
    no("guided_choice", guided_choice=[]), no("guided_json", guided_json=nested(65)),
    ok(structured_outputs={"regex": "[a-z]+"}), ok(structured_outputs={"json_object": True}),
    ok(structured_outputs={"json": nested(64)}),
    no("structured_outputs", structured_outputs={"regex": "\x00"}),
    no("structured_outputs", structured_outputs={"grammar": "  "}),
    no("structured_outputs", structured_outputs={"json": nested(65)}),
    ok(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": nested(64)}}),
    no("response_format", response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": nested(65)}}),
    ok(kinds=CHAT, tools=tool(nested(58)), tool_choice="required"),
    no("tools", kinds=CHAT, tools=tool(nested(64)), tool_choice="required"),
    ok(kinds=CHAT, tools=tool(nested(64)), tool_choice={"type": "function", "function": {"name": "f"}}),
    no("tools", kinds=CHAT, tools=tool(nested(65)), tool_choice={"type": "function", "function": {"name": "f"}}),
]


def case_id(case: Case) -> str:
    fields = dict(case.fields)
    if case.budget_offset is not None:
        fields["min_tokens"] = f"budget+{case.budget_offset}"
    return json.dumps(fields)[:60]


CASES = [pytest.param(kind, case, id=f"{kind}-{i}-{case_id(case)}")
         for i, case in enumerate(GRID) for kind in case.kinds]


# ---- what reaches vLLM ---------------------------------------------------------------------


def base_body(kind: str) -> dict:
    return {"messages": [{"role": "user", "content": "Hi"}]} if kind == "chat" else {"prompt": "Once"}


def prepare(service, body: dict):
    """(the 400, None) or (None, the prepared request); any other failure is a bug."""
    try:
        return None, service.prepare(json.dumps(body))
    except BadRequestError as error:
        return error, None


def sent(prepared) -> list[str]:
    return [call.inputs["sampling_parameters"][0].decode() for call in prepared.calls]


def without_our_checks(kind: str, fields: dict, budget: int) -> str | None:
    """The sampling-parameters JSON a request with `fields` would send, were our checks not
    there (None where it is not a simple mapping, e.g. what tool_choice builds)."""
    from vllm.sampling_params import SamplingParams

    params = {"max_tokens": fields.get("max_completion_tokens", fields.get("max_tokens", budget))}
    for name, value in fields.items():
        if name in ("max_tokens", "max_completion_tokens") or (name == "logprobs" and kind == "chat"):
            continue
        if name in SamplingParams.__annotations__:
            params[name] = value
        elif name == "top_logprobs":
            params["logprobs"] = value
        elif name.startswith("guided_"):
            params["structured_outputs"] = json.dumps({name.removeprefix("guided_"): value})
        elif name == "structured_outputs":
            params["structured_outputs"] = json.dumps(value)
        elif name == "response_format":
            params["structured_outputs"] = json.dumps({"json": value["json_schema"]["schema"]})
        else:
            return None
    return json.dumps(params)


@pytest.fixture(scope="module")
def defaults(services) -> dict:
    """Per kind: the default completion budget and the prompt the engine gets."""
    found = {}
    for kind, service in services.items():
        _, prepared = prepare(service, base_body(kind))
        found[kind] = (json.loads(sent(prepared)[0])["max_tokens"], prepared.prompt.text)
    return found


@pytest.mark.parametrize(("kind", "case"), CASES)
def test_what_vllm_refuses_is_refused_first(kind, case, services, defaults, standin, engine):
    budget, prompt = defaults[kind]
    fields = dict(case.fields)
    if case.budget_offset is not None:
        fields["min_tokens"] = budget + case.budget_offset
    refused, prepared = prepare(services[kind], {**base_body(kind), **fields})
    if prepared is not None:
        for sampling in sent(prepared):
            verdict = vllm_refusal(standin, engine, sampling, prompt)
            assert verdict is None, f"we accept, vLLM refuses: {sampling}: {verdict}"
        assert case.param is None, f"accepted, but the case expects a 400 naming {case.param!r}"
        return
    assert refused.status == 400 and refused.param is not None, refused.message
    assert refused.param.split("[")[0].split(".")[0] == case.param, (refused.param, refused.message)
    would_send = without_our_checks(kind, fields, budget)
    if would_send is None:  # not a plain mapping: the accepted case next to it holds the boundary
        return
    verdict = vllm_refusal(standin, engine, would_send, prompt)
    if case.stricter:
        assert verdict is None, f"vLLM refuses this too ({verdict}): drop the case's `stricter`"
    else:
        assert verdict is not None, f"we refuse what vLLM takes: {refused.message}"


# Random combinations of the numeric fields, biased to their boundaries.
NUMBERS = {
    "temperature": st.sampled_from([0, 1e-9, 1e-5, 0.01, 1, 2, 2.1, -1e-12, float("nan")]) | st.floats(-1, 3),
    "top_p": st.sampled_from([0, 1e-12, 1, 1.1, -0.0]) | st.floats(-0.5, 1.5),
    "top_k": st.sampled_from([-2, -1, 0, 1, VOCAB, UINT64_MAX, UINT64_MAX + 1]) | st.integers(-5, 10**6),
    "min_p": st.sampled_from([0, 1, -0.01, 1.01]) | st.floats(-0.5, 1.5),
    "presence_penalty": st.floats(-3, 3) | st.sampled_from([-2, 2]),
    "frequency_penalty": st.floats(-3, 3) | st.sampled_from([-2, 2]),
    "repetition_penalty": st.floats(-1, 3) | st.sampled_from([0, 1e-300, 2]),
    "seed": st.sampled_from([-1, INT64_MIN, INT64_MAX, INT64_MAX + 1, INT64_MIN - 1]) | st.integers(-10, 10),
    "max_tokens": st.sampled_from([0, 1, 2, 16, 2035, 2036, 2**64]) | st.integers(-2, 40),
    "min_tokens": st.sampled_from([0, 1, 16, 17, 2035, 2036, 2**64]) | st.integers(-2, 40),
    "n": st.integers(0, 3),
    "stop_token_ids": st.lists(st.sampled_from([-1, 0, 3, VOCAB - 1, VOCAB]), max_size=3),
    "allowed_token_ids": st.lists(st.sampled_from([-1, 0, 3, VOCAB - 1, VOCAB]), max_size=3),
    "bad_words": st.lists(st.sampled_from(["", " ", "\n", "a", " b", "w1", "\u200b"]), max_size=3),
}


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(["chat", "completion"]), fields=st.fixed_dictionaries({}, optional=NUMBERS))
def test_any_mix_of_sampling_values_is_refused_by_us_or_taken_by_vllm(kind, fields, services, defaults, standin,
                                                                         engine):
    refused, prepared = prepare(services[kind], {**base_body(kind), **fields})
    if refused is not None:
        assert refused.param is not None and refused.param.split("[")[0] in fields, refused.message
        return
    for sampling in sent(prepared):
        verdict = vllm_refusal(standin, engine, sampling, defaults[kind][1])
        assert verdict is None, f"we accept, vLLM refuses: {sampling}: {verdict}"


@pytest.mark.parametrize(("fields", "cause"), [
    ({"guided_regex": "("}, "unclosed group"),
    ({"guided_grammar": "garbage"}, "grammar"),
    ({"guided_json": {"type": "foo"}}, "foo"),
])
def test_whether_a_constraint_compiles_is_left_to_the_engine(fields, cause, services, defaults, standin, engine):
    """We do not compile regexes, grammars or schemas (that takes vLLM's grammar backends):
    the engine refuses them when the request arrives, with its reason, which the client sees."""
    _, prepared = prepare(services["chat"], {**base_body("chat"), **fields})
    [sampling] = sent(prepared)
    verdict = vllm_refusal(standin, engine, sampling, defaults["chat"][1])
    assert verdict is not None and verdict.startswith("engine: VLLMValidationError") and cause in verdict


@pytest.mark.parametrize(("fields", "param", "message"), [
    ({"top_p": 0}, "top_p", "Invalid value for 'top_p': Input should be greater than 0."),
    ({"top_k": UINT64_MAX + 1}, "top_k", "Input should be less than or equal to 18446744073709551615"),
    ({"max_tokens": 6, "min_tokens": 7}, "min_tokens", "'min_tokens' (7) must not be more than 'max_tokens' (6)."),
    ({"min_tokens": 3000}, "min_tokens", "'min_tokens' (3000) must not be more than this request's completion "
                                         "budget of 2035 tokens (the default without 'max_tokens')."),
    ({"stop_token_ids": [5, VOCAB, VOCAB + 1]}, "stop_token_ids",
     "'stop_token_ids' holds token ids outside this model's vocabulary (2048, 2049); they go from 0 to 2047."),
    ({"allowed_token_ids": [VOCAB]}, "allowed_token_ids", "outside this model's vocabulary (2048)"),
    ({"bad_words": ["ok", " \t"]}, "bad_words[1]", "Invalid value for 'bad_words[1]': a bad word must not be only "
                                                   "whitespace."),
    ({"bad_words": WORDS}, "bad_words", "at most 64 different words are supported, got 65"),
    ({"guided_regex": "a\x00"}, "guided_regex", "must not contain a NUL character"),
    ({"structured_outputs": {"grammar": " "}}, "structured_outputs.grammar", "must not be empty or only whitespace"),
    ({"guided_json": nested(65)}, "guided_json", "The JSON schema in 'guided_json' nests objects and arrays more "
                                                 "than 64 levels deep; at most 64 are supported."),
    ({"tools": tool(nested(64)), "tool_choice": "required"}, "tools", "that 'tool_choice' makes of 'tools'"),
])
def test_the_400s_say_what_is_allowed(fields, param, message, services):
    refused, _ = prepare(services["chat"], {**base_body("chat"), **fields})
    assert refused.param == param and message in refused.message, refused.message


def test_token_ids_are_checked_only_against_a_known_vocabulary():
    from tritonchat.plan import Limits, plan_generations, requested_generation
    from tritonchat.protocol import parse_chat_request
    from tritonchat.template import Prompt

    request = parse_chat_request(json.dumps({**base_body("chat"), "stop_token_ids": [99], "logit_bias": {"-1": 1}}))
    asked = requested_generation(request)
    assert plan_generations(asked, request, Prompt("p", 3), Limits(1000))  # unknown: the engine's to say
    with pytest.raises(BadRequestError) as info:
        plan_generations(asked, request, Prompt("p", 3), Limits(1000, vocab_size=99))
    assert info.value.param == "stop_token_ids"
    request = parse_chat_request(json.dumps({**base_body("chat"), "logit_bias": {"-1": 1}}))
    with pytest.raises(BadRequestError) as info:
        plan_generations(requested_generation(request), request, Prompt("p", 3), Limits(1000, vocab_size=99))
    assert info.value.param == "logit_bias" and "(-1)" in info.value.message


# ---- the stand-in backend answers as the real one ------------------------------------------


@pytest.mark.parametrize(("sampling", "cause"), [
    ({"temperature": -3}, "temperature must be non-negative"),
    ({"top_p": 0}, "top_p must be in (0, 1]"),
    ({"min_tokens": 6, "max_tokens": 5}, "min_tokens must be less than or equal to max_tokens=5"),
    ({"no_such_parameter": 1}, "no_such_parameter"),
    ({"max_tokens": "many"}, "invalid literal for int()"),
    ({"structured_outputs": json.dumps({"json": {}, "regex": "a"})}, "one kind of structured outputs"),
])
def test_the_stand_in_answers_a_refused_value_as_the_real_backend(standin, sampling, cause):
    log = Log()
    with pytest.raises(AttributeError) as info:
        standin.build_sampling_params(json.dumps(sampling), log)
    assert str(info.value) == NO_SAMPLING_PARAMS
    [line] = log.errors
    assert line.startswith("[vllm] Was trying to create `TritonSamplingParams`, but got exception: ") and cause in line


def test_the_stand_in_builds_what_vllm_takes(standin):
    log = Log()
    params, lora = standin.build_sampling_params(json.dumps({"temperature": "0.5", "max_tokens": 3,
                                                             "lora_name": "sql", "stop": ["x"]}), log)
    assert (params.temperature, params.max_tokens, params.stop, lora, log.errors) == (0.5, 3, ["x"], "sql", [])


class BackendRequest:
    """A request to the stand-in backend, with the tensors `_generate` reads."""

    def __init__(self, sampling_parameters: str):
        self.tensors = {
            "text_input": fakes.Tensor("text_input", [b"Hello"]),
            "sampling_parameters": fakes.Tensor("sampling_parameters", [sampling_parameters.encode()]),
        }
        self.sender = fakes.ResponseSender()

    def get_response_sender(self):
        return self.sender


def test_the_stand_in_fails_the_request_with_the_real_backends_message(standin):
    """From the request to its one error response, without Triton or an engine: the cause is
    logged, the client gets "Error generating stream: 'NoneType' object has no attribute 'lora_name'"."""
    model = standin.TritonPythonModel.__new__(standin.TritonPythonModel)
    model.logger, model.supported_tasks, model.running_metric = Log(), ("generate",), None
    model.tasks, model.responses, model.text_dtype = set(), queue.Queue(), object

    asyncio.run(model._generate(BackendRequest(json.dumps({"top_p": 0, "max_tokens": 4}))))

    _state, response, flags = model.responses.get_nowait()
    assert flags == fakes.FINAL and model.responses.empty()
    assert response.error().message() == f"Error generating stream: {NO_SAMPLING_PARAMS}"
    assert [t.as_numpy().tolist() for t in response.output_tensors()] == [["N/A"]]
    created, generating = model.logger.errors
    assert created == ("[vllm] Was trying to create `TritonSamplingParams`, but got exception: top_p must be in "
                       "(0, 1], got 0.0. (parameter=top_p, value=0.0)")
    assert generating.startswith("[vllm] Error generating stream: Traceback") and NO_SAMPLING_PARAMS in generating
