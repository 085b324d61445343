"""Property-based tests (hypothesis): request parsing never fails but with a 400, and the
streaming state machine gives the same answer however the generation is split or merged."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tritonchat.errors import BadRequestError
from tritonchat.formats import GenerationOutput
from tritonchat.protocol import parse_chat_request, parse_completion_request
from tritonchat.chunks import ChatResponseBuilder

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)
FIELD_NAMES = st.sampled_from([
    "messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop",
    "stream", "stream_options", "logprobs", "top_logprobs", "logit_bias", "response_format", "tools", "tool_choice",
    "parallel_tool_calls", "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "min_tokens",
    "stop_token_ids", "metadata", "user", "prompt", "echo", "suffix", "best_of", "other",
])
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "robot"])},
    optional={"content": JSON | st.text(), "name": JSON, "tool_call_id": JSON, "tool_calls": JSON},
)
REQUEST = st.fixed_dictionaries({"messages": st.lists(MESSAGE, max_size=4) | JSON},
                                optional={"prompt": JSON | st.text()}).flatmap(
    lambda base: st.dictionaries(FIELD_NAMES, JSON, max_size=6).map(lambda extra: {**base, **extra}))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(REQUEST)
def test_any_json_request_is_parsed_or_refused_with_a_400(request):
    for parse in (parse_chat_request, parse_completion_request):
        try:
            parse(json.dumps(request))
        except BadRequestError as error:
            assert error.status == 400 and error.to_dict()["error"]["type"] == "invalid_request_error"


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_any_bytes_are_parsed_or_refused_with_a_400(body):
    try:
        parse_chat_request(body)
    except BadRequestError as error:
        assert error.status == 400


def test_deep_nesting_is_a_400_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    for body in ('{"messages": ' + deep + "}", '{"messages": [{"role": "user", "content": "x"}], "metadata": '
                 + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "}"):
        try:
            parse_chat_request(body)
        except BadRequestError as error:
            assert error.status == 400


PIECES = st.lists(st.text(max_size=8), min_size=1, max_size=12)


@settings(max_examples=200)
@given(PIECES, st.data())
def test_streamed_chunks_add_up_to_the_whole_completion(pieces, data):
    """However the engine's outputs are merged before sending, the chunks carry the same text
    and usage as the whole completion, in OpenAI's layout."""
    outputs = [GenerationOutput(text=p, completion_tokens=1, prompt_tokens=3) for p in pieces]
    outputs[-1].finish_reason = data.draw(st.sampled_from(["stop", "length"]))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(outputs) - 1), max_size=len(outputs) - 1))) if len(outputs) > 1 else []
    merged = []
    for start, end in zip([0, *cuts], [*cuts, len(outputs)]):
        group = outputs[start:end]
        combined = group[0]
        for later in group[1:]:
            combined = combined.merge(later)
        merged.append(combined)

    def builder():
        return ChatResponseBuilder(completion_id="chatcmpl-x", created=1, model="m", system_fingerprint="fp",
                                   include_usage=True)

    streamed = builder()
    chunks = [c for output in merged for c in streamed.stream_output(0, output)]
    chunks += streamed.stream_finish(0) + streamed.stream_usage()
    parsed = [ChatCompletionChunk.model_validate_json(c) for c in chunks]
    whole = builder()
    for output in outputs:
        whole.add_output(0, output)
    completion = ChatCompletion.model_validate_json(whole.completion())
    text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
    assert text == completion.choices[0].message.content == "".join(pieces)
    finishes = [c.choices[0].finish_reason for c in parsed if c.choices and c.choices[0].finish_reason]
    assert finishes == [completion.choices[0].finish_reason]
    assert parsed[-1].usage == completion.usage and parsed[-1].choices == []
