"""Every field of OpenAI's and vLLM's request schemas is honoured or refused (protocol/known.py):
checked against the schemas of the installed `openai` and `vllm` packages, so a field either
adds later shows up here."""

from __future__ import annotations

import json
import typing

import pytest

from tritonchat.errors import BadRequestError
from tritonchat.formats import EnsembleFormat, FormatOptions, GenerationRequest, TensorRtLlmFormat, VllmFormat
from tritonchat.plan import sampling_for
from tritonchat.protocol import ChatCompletionRequest, CompletionRequest, parse_chat_request, parse_completion_request
from tritonchat.protocol import known


def _openai_fields(module) -> set[str]:
    return set(typing.get_type_hints(module.CompletionCreateParamsBase))


def _vllm_fields(name: str, module: str) -> set[str]:
    """The fields of vLLM's request model `name`, read from its source (importing vLLM's server
    modules here would cost a minute of import and of interpreter shutdown)."""
    import ast
    import importlib.util
    from pathlib import Path

    root = Path(importlib.util.find_spec("vllm").origin).parent / "entrypoints" / "openai"
    for path in (root / module / "protocol.py", root / "protocol.py"):  # newer layout, then older
        if path.is_file():
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    return {statement.target.id for statement in node.body
                            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                            and not statement.target.id.startswith("_")}
    raise AssertionError(f"vLLM's {name} was not found")


def test_every_schema_field_is_honoured_or_refused():
    from openai.types import completion_create_params
    from openai.types.chat import completion_create_params as chat_create_params

    vllm_chat = _vllm_fields("ChatCompletionRequest", "chat_completion")
    vllm_completion = _vllm_fields("CompletionRequest", "completion")
    assert len(vllm_chat) > 50 and "bad_words" in vllm_chat and "prompt_embeds" in vllm_completion
    for ours, rules, fields in (
        (ChatCompletionRequest, known.CHAT, _openai_fields(chat_create_params) | vllm_chat),
        (CompletionRequest, known.COMPLETION, _openai_fields(completion_create_params) | vllm_completion),
    ):
        missing = sorted(f for f in fields if f not in ours.model_fields and f not in rules and f not in known.IGNORED)
        assert not missing, f"{ours.__name__}: fields of OpenAI's or vLLM's schema neither honoured nor refused: {missing}"


def chat(**fields) -> str:
    return json.dumps({"messages": [{"role": "user", "content": "hi"}], **fields})


@pytest.mark.parametrize("name", sorted(known.CHAT))
def test_chat_fields_are_refused_unless_at_their_no_op_value(name):
    allowed, _ = known.CHAT[name]
    for value in (None, *allowed):
        parse_chat_request(chat(**{name: value}))
    changing = {bool: True, list: ["audio"], int: 2}.get(type(allowed[0]) if allowed else None, {"x": 1})
    if allowed and isinstance(allowed[0], bool):
        changing = not allowed[0]
    with pytest.raises(BadRequestError) as info:
        parse_chat_request(chat(**{name: changing}))
    assert info.value.param == name and "not supported" in info.value.message


def test_completion_fields_and_ignored_fields():
    parse_completion_request(json.dumps({"prompt": "x", "add_special_tokens": True, "use_beam_search": False}))
    with pytest.raises(BadRequestError) as info:
        parse_completion_request(json.dumps({"prompt": "x", "add_special_tokens": False}))
    assert info.value.param == "add_special_tokens"
    with pytest.raises(BadRequestError) as info:  # true is not 1
        parse_chat_request(chat(length_penalty=True))
    assert info.value.param == "length_penalty"
    parse_chat_request(chat(length_penalty=1, prompt_cache_key="k", safety_identifier="s", request_id="r", priority=5))


def _generation(request) -> GenerationRequest:
    return GenerationRequest(prompt="p", prompt_tokens=1, max_tokens=4, stream=True, sampling=sampling_for(request))


def test_vllm_sampling_extras_reach_vllm_and_flags_only_when_they_change_something():
    request = parse_chat_request(chat(bad_words=["no"], allowed_token_ids=[1, 2], include_stop_str_in_output=True,
                                      skip_special_tokens=False, spaces_between_special_tokens=False))
    params = VllmFormat().sampling_parameters(_generation(request))
    assert params["bad_words"] == ["no"] and params["allowed_token_ids"] == [1, 2]
    assert params["include_stop_str_in_output"] is True and params["skip_special_tokens"] is False
    assert params["spaces_between_special_tokens"] is False
    defaults = sampling_for(parse_chat_request(chat(include_stop_str_in_output=False, skip_special_tokens=True,
                                                    spaces_between_special_tokens=True)))
    assert defaults == {}


@pytest.mark.parametrize("fields", [{"bad_words": ["x"]}, {"allowed_token_ids": [3]},
                                    {"include_stop_str_in_output": True}, {"spaces_between_special_tokens": False}])
def test_tensorrt_llm_formats_refuse_what_they_cannot_do(fields, tokenizer):
    generation = _generation(parse_chat_request(chat(**fields)))
    for fmt in (EnsembleFormat(FormatOptions(tokenizer=tokenizer)), TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer))):
        with pytest.raises(BadRequestError) as info:
            fmt.check(generation)
        assert info.value.param == next(iter(fields))


def test_skip_special_tokens_false_on_the_ensemble_needs_its_postprocessing_to_keep_them(tokenizer):
    generation = _generation(parse_chat_request(chat(skip_special_tokens=False)))
    TensorRtLlmFormat(FormatOptions(tokenizer=tokenizer)).check(generation)  # detokenized here: honoured
    with pytest.raises(BadRequestError) as info:
        EnsembleFormat(FormatOptions(tokenizer=tokenizer)).check(generation)
    assert info.value.param == "skip_special_tokens"
    EnsembleFormat(FormatOptions(tokenizer=tokenizer, keeps_special_tokens=True)).check(generation)


def test_reasoning_effort_and_documents_reach_the_template(tokenizer):
    from tritonchat.template import PromptRenderer

    template = ("{{ reasoning_effort | default('unset') }}|{% for d in documents or [] %}{{ d.title }};"
                "{% endfor %}{{ messages[0].content }}")
    renderer = PromptRenderer(tokenizer, "string")
    request = parse_chat_request(chat(reasoning_effort="high", documents=[{"title": "A", "text": "a"}],
                                      chat_template=template))
    assert renderer.render(request).text.endswith("high|A;hi")
    explicit = parse_chat_request(chat(reasoning_effort="high", chat_template=template,
                                       chat_template_kwargs={"reasoning_effort": "low"}))
    assert renderer.render(explicit).text.endswith("low|hi")


@pytest.mark.parametrize(("fields", "constraint"), [
    ({"structured_outputs": {"choice": ["yes", "no"]}}, {"choice": ["yes", "no"]}),
    ({"structured_outputs": {"regex": "[a-c]+"}}, {"regex": "[a-c]+"}),
    ({"structured_outputs": {"grammar": "root ::= \"a\""}}, {"grammar": "root ::= \"a\""}),
    ({"structured_outputs": {"json": {"type": "object"}}}, {"json": {"type": "object"}}),
    ({"structured_outputs": {"json": "{\"type\": \"object\"}"}}, {"json": {"type": "object"}}),
    ({"structured_outputs": {"json_object": True}}, {"json_object": True}),
    ({"guided_json": {"type": "object"}}, {"json": {"type": "object"}}),
    ({"guided_regex": "x+"}, {"regex": "x+"}),
    ({"guided_choice": ["a"]}, {"choice": ["a"]}),
    ({"guided_grammar": "root ::= \"a\""}, {"grammar": "root ::= \"a\""}),
])
def test_structured_outputs_and_the_guided_aliases(fields, constraint):
    from tritonchat.plan import structured_output_for

    request = parse_chat_request(chat(**fields))
    assert structured_output_for(request) == constraint
    params = VllmFormat(FormatOptions(structured_outputs_key="guided_decoding")).sampling_parameters(
        GenerationRequest(prompt="p", prompt_tokens=1, max_tokens=4, stream=True, structured=constraint))
    assert json.loads(params["guided_decoding"]) == constraint


@pytest.mark.parametrize(("fields", "param"), [
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"structured_outputs": {}}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a", "whitespace_pattern": " "}}, "structured_outputs.whitespace_pattern"),
    ({"structured_outputs": {"json": "not a schema"}}, "structured_outputs"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_choice"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
    ({"guided_decoding_backend": "xgrammar"}, "guided_decoding_backend"),
])
def test_structured_output_errors_name_the_field(fields, param):
    with pytest.raises(BadRequestError) as info:
        parse_chat_request(chat(**fields))
    assert info.value.param == param


def test_a_constraint_with_a_named_tool_choice_is_refused():
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with pytest.raises(BadRequestError) as info:
        parse_chat_request(chat(tools=[tool], tool_choice={"type": "function", "function": {"name": "f"}},
                                structured_outputs={"regex": "a"}))
    assert info.value.param == "structured_outputs"


def test_tensorrt_llm_guides_for_each_constraint():
    from tritonchat.formats.tensorrt_llm import guided_decoding

    assert guided_decoding({"regex": "[0-9]+"}) == ("regex", "[0-9]+")
    assert guided_decoding({"choice": ["yes", "a.b"]}) == ("regex", "(yes|a\\.b)")
    assert guided_decoding({"grammar": "root ::= x"}) == ("ebnf_grammar", "root ::= x")
    assert guided_decoding({"json": {"type": "object"}}) == ("json_schema", '{"type": "object"}')


def test_guided_json_as_a_string():
    from tritonchat.plan import structured_output_for

    assert structured_output_for(parse_chat_request(chat(guided_json='{"type": "object"}'))) == {"json": {"type": "object"}}
    with pytest.raises(BadRequestError) as info:
        parse_chat_request(chat(guided_json="[1]"))
    assert info.value.param == "guided_json"
