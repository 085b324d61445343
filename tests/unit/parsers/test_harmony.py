"""gpt-oss (Harmony) output: the `openai` tool parser and the `openai_gptoss` reasoning parser.

Realistic and malformed outputs in every splitting, generated outputs in random splittings
(hypothesis), and the results of vLLM's own Harmony parsing on the same token ids. The o200k
vocabulary comes from harness/o200k.py (build/o200k), so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import o200k as make_o200k_vocab
from harness.repositories import ROOT
from tritonchat.parsers import Delta, ReasoningParser, get_reasoning_parser, get_tool_parser
from tritonchat.parsers.harmony import HarmonyReasoningParser, HarmonyToolParser, function_name

from .samples import arguments_fed_by_character, split_description, splittings, stream_tool_parser

pytest.importorskip("openai_harmony")

VOCAB_DIR = ROOT / "build" / "o200k"


@pytest.fixture(scope="module", autouse=True)
def o200k_vocabulary():
    """The vocabulary openai_harmony reads, made offline, and TIKTOKEN_ENCODINGS_BASE pointing at it."""
    target = make_o200k_vocab.make(VOCAB_DIR)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_ENCODINGS_BASE", str(target.parent))
        yield target.parent


A = "<|channel|>analysis<|message|>"
NEXT = "<|start|>assistant"
FINAL = "<|channel|>final<|message|>"
WEATHER_CALL = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
UNICODE_ARGUMENTS = '{"city": "Zürich", "note": "日本語 🌧 — \\u00e9"}'


@dataclass(frozen=True)
class HarmonySample:
    name: str
    text: str
    reasoning: str | None
    content: str | None
    calls: list[tuple[str, str]] = field(default_factory=list)
    # content from the reasoning parser alone, where calls are content; None: same as `content`
    gptoss_content: str | None = None
    realistic: bool = True  # compared with vLLM

    def __str__(self) -> str:
        return self.name

    @property
    def content_without_calls(self) -> str | None:
        return self.gptoss_content if self.calls else self.content


SAMPLES = [
    HarmonySample(
        "reasoning then final",
        A + "User asks 2+2. Simple.<|end|>" + NEXT + FINAL + "2 + 2 = 4.<|return|>",
        "User asks 2+2. Simple.",
        "2 + 2 = 4.",
    ),
    HarmonySample(
        "reasoning then one call",
        A + "User asks weather in Oslo. Use get_weather.<|end|>" + NEXT + WEATHER_CALL + '{"city":"Oslo"}<|call|>',
        "User asks weather in Oslo. Use get_weather.",
        None,
        [("get_weather", '{"city":"Oslo"}')],
        gptoss_content='{"city":"Oslo"}',
    ),
    HarmonySample(
        "two calls, the second with its recipient before the channel",
        A + "Two lookups.<|end|>" + NEXT + WEATHER_CALL + '{"city":"Oslo"}<|call|>'
        + NEXT + ' to=functions.get_time<|channel|>commentary json<|message|>{"tz": "Europe/Oslo"}<|call|>',
        "Two lookups.",
        None,
        [("get_weather", '{"city":"Oslo"}'), ("get_time", '{"tz": "Europe/Oslo"}')],
        gptoss_content='{"city":"Oslo"}\n{"tz": "Europe/Oslo"}',
    ),
    HarmonySample(
        "preamble on commentary, then a call",
        A + "Need weather.<|end|>" + NEXT + "<|channel|>commentary<|message|>Let me check the weather.<|end|>"
        + NEXT + WEATHER_CALL + '{"city": "Oslo"}<|call|>',
        "Need weather.",
        "Let me check the weather.",
        [("get_weather", '{"city": "Oslo"}')],
        gptoss_content='Let me check the weather.\n{"city": "Oslo"}',
    ),
    HarmonySample(
        "missing final stop token",
        A + "Greeting.<|end|>" + NEXT + FINAL + "Hello! How can I help?",
        "Greeting.",
        "Hello! How can I help?",
    ),
    HarmonySample(
        "missing <|call|>",
        A + "Weather.<|end|>" + NEXT + WEATHER_CALL + '{"city":"Oslo"}',
        "Weather.",
        None,
        [("get_weather", '{"city":"Oslo"}')],
        gptoss_content='{"city":"Oslo"}',
    ),
    HarmonySample(
        "cut off mid-arguments",
        A + "Weather.<|end|>" + NEXT + WEATHER_CALL + '{"city": "Os',
        "Weather.",
        None,
        [("get_weather", '{"city": "Os')],
        gptoss_content='{"city": "Os',
    ),
    HarmonySample(
        "cut off while reasoning",
        A + "The user wants",
        "The user wants",
        None,
    ),
    HarmonySample(
        "unicode",
        A + "Nutzer fragt: Wetter in Zürich? 日本語 🌧<|end|>" + NEXT + WEATHER_CALL + UNICODE_ARGUMENTS + "<|call|>",
        "Nutzer fragt: Wetter in Zürich? 日本語 🌧",
        None,
        [("get_weather", UNICODE_ARGUMENTS)],
        gptoss_content=UNICODE_ARGUMENTS,
    ),
    HarmonySample(
        "unicode final",
        A + "ok<|end|>" + NEXT + FINAL + "Zürich: 🌧, 12 °C — 東京は晴れ。<|return|>",
        "ok",
        "Zürich: 🌧, 12 °C — 東京は晴れ。",
    ),
    HarmonySample(
        "a call on the analysis channel (accepted, as by vLLM)",
        "<|channel|>analysis to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>",
        None,
        None,
        [("get_weather", '{"city":"Oslo"}')],
        gptoss_content='{"city":"Oslo"}',
    ),
    HarmonySample(
        "recipient without functions. (accepted, as by vLLM)",
        A + "x<|end|>" + NEXT + "<|channel|>commentary to=get_time json<|message|>{}<|call|>",
        "x",
        None,
        [("get_time", "{}")],
        gptoss_content="{}",
    ),
    HarmonySample(
        "two analysis messages are joined with a newline",
        A + "First thought.<|end|>" + NEXT + A + "Second thought.<|end|>" + NEXT + FINAL + "Done.<|return|>",
        "First thought.\nSecond thought.",
        "Done.",
    ),
    HarmonySample(
        "empty analysis",
        A + "<|end|>" + NEXT + FINAL + "Hi.<|return|>",
        None,
        "Hi.",
    ),
    HarmonySample(
        "the built-in python tool on the analysis channel is reasoning",
        A + "Compute.<|end|>" + NEXT + "<|channel|>analysis to=python code<|message|>print(6 * 7)<|call|>",
        "Compute.\nprint(6 * 7)",
        None,
    ),
    HarmonySample(
        "the reply repeats <|start|>assistant",
        NEXT + FINAL + "Hi.<|return|>",
        None,
        "Hi.",
    ),
    HarmonySample(
        "markers inside the final text are text",
        FINAL + "Type <|start|> or <| or a < b |> c.<|return|>",
        None,
        "Type <|start|> or <| or a < b |> c.",
    ),
    HarmonySample(
        "a call with empty arguments text",
        A + "x<|end|>" + NEXT + WEATHER_CALL + "<|call|>",
        "x",
        None,
        [("get_weather", "")],
        gptoss_content=None,
    ),
    # Malformed: nothing raises, nothing is lost.
    HarmonySample(
        "plain text without markup is content",
        "Hello there, no markup at all.",
        None,
        "Hello there, no markup at all.",
        realistic=False,
    ),
    HarmonySample(
        "text between messages: it and the rest are content",
        A + "x<|end|>oops " + NEXT + FINAL + "y<|return|>",
        "x",
        "oops " + NEXT + FINAL + "y<|return|>",
        realistic=False,
    ),
    HarmonySample(
        "text after <|return|> is content",
        A + "x<|end|>" + NEXT + FINAL + "y<|return|>more",
        "x",
        "y\nmore",
        realistic=False,
    ),
    HarmonySample(
        "cut off inside a header",
        A + "x<|end|>" + NEXT + "<|channel|>fin",
        "x",
        NEXT + "<|channel|>fin",
        realistic=False,
    ),
    HarmonySample(
        "cut off inside a marker",
        A + "x<|end|><|sta",
        "x",
        "<|sta",
        realistic=False,
    ),
    HarmonySample(
        "a header that does not parse",
        A + "x<|end|>" + NEXT + "<|channel|>commentary to=functions.f extra words json<|message|>{}<|call|>",
        "x",
        NEXT + "<|channel|>commentary to=functions.f extra words json<|message|>{}<|call|>",
        realistic=False,
    ),
    HarmonySample(
        "an unknown author",
        A + "x<|end|><|start|>bob<|message|>hi<|end|>",
        "x",
        "<|start|>bob<|message|>hi<|end|>",
        realistic=False,
    ),
    HarmonySample(
        "another role's message is content",
        A + "x<|end|><|start|>user<|message|>hi<|end|>",
        "x",
        "hi",
        realistic=False,
    ),
    HarmonySample(
        "an unknown channel is content",
        "<|channel|>notes<|message|>abc<|end|>" + NEXT + FINAL + "d",
        None,
        "abc\nd",
        realistic=False,
    ),
    HarmonySample(
        "the built-in browser tool on commentary is content",
        '<|channel|>commentary to=browser.search json<|message|>{"query": "x"}<|call|>',
        None,
        '{"query": "x"}',
        realistic=False,
    ),
    HarmonySample(
        "a stray <| at the end of the reasoning",
        A + "think <|",
        "think <|",
        None,
        realistic=False,
    ),
    HarmonySample("a stop token alone", "<|return|>", None, "<|return|>", realistic=False),
    HarmonySample("empty output", "", None, None, realistic=False),
]
SAMPLE_IDS = [sample.name for sample in SAMPLES]


@dataclass
class Result:
    reasoning: str | None
    content: str | None
    calls: list[tuple[str, str]]


def stream_tools(pieces: list[str], parser: HarmonyToolParser | None = None) -> Result:
    streamed = stream_tool_parser(parser or HarmonyToolParser(), pieces)  # also checks the delta layout
    reasoning = "".join(delta.reasoning for delta in streamed.deltas)
    return Result(reasoning or None, streamed.content or None, [(c.name, c.arguments) for c in streamed.calls])


def stream_reasoning(pieces: list[str]) -> Result:
    parser = HarmonyReasoningParser()
    deltas = [parser.feed(piece) for piece in pieces] + [parser.finish()]
    assert not any(delta.tool_calls for delta in deltas)
    return Result("".join(d.reasoning for d in deltas) or None, "".join(d.content for d in deltas) or None, [])


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_tool_parser_in_every_splitting(sample: HarmonySample):
    expected = Result(sample.reasoning, sample.content, sample.calls)
    assert stream_tools([sample.text]) == expected, "whole"
    for pieces in splittings(sample.text):
        assert stream_tools(pieces) == expected, split_description(pieces)


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_reasoning_parser_in_every_splitting(sample: HarmonySample):
    expected = Result(sample.reasoning, sample.content_without_calls, [])
    assert stream_reasoning([sample.text]) == expected, "whole"
    for pieces in splittings(sample.text):
        assert stream_reasoning(pieces) == expected, split_description(pieces)


@pytest.mark.parametrize("sample", [s for s in SAMPLES if s.calls], ids=[s.name for s in SAMPLES if s.calls])
def test_arguments_are_never_ahead_of_the_model(sample: HarmonySample):
    sent = arguments_fed_by_character(HarmonyToolParser(), sample.text)
    assert [sent.get(index, "") for index in range(len(sample.calls))] == [args for _, args in sample.calls]


def feed_each(pieces: list[str], parser=None) -> list[Delta]:
    parser = parser or HarmonyToolParser()
    return [parser.feed(piece) for piece in pieces] + [parser.finish()]


def test_a_marker_split_across_pieces_never_leaks():
    deltas = feed_each(["<|chan", "nel|>anal", "ysis<|mess", "age|>Hm.<|e", "nd|><|start|>assis", "tant<|channel|>fi",
                        "nal<|message|>Hi", "!<|ret", "urn|>"])
    assert [delta.reasoning for delta in deltas] == ["", "", "", "Hm.", "", "", "", "", "", ""]
    assert [delta.content for delta in deltas] == ["", "", "", "", "", "", "Hi", "!", "", ""]


def test_the_call_is_announced_when_its_body_starts_and_its_arguments_stream():
    deltas = feed_each([WEATHER_CALL, '{"ci', 'ty": "Os', 'lo"}', "<|call|>"])
    pieces = [piece for delta in deltas for piece in delta.tool_calls]
    assert [(piece.index, piece.name, piece.arguments) for piece in pieces] == [
        (0, "get_weather", ""), (0, None, '{"ci'), (0, None, 'ty": "Os'), (0, None, 'lo"}')]
    assert pieces[0].id and all(piece.id is None for piece in pieces[1:])


def test_reasoning_is_streamed_as_it_comes():
    deltas = feed_each([A + "Let me", " think", ".<|end|>"])
    assert [delta.reasoning for delta in deltas] == ["Let me", " think", ".", ""]


def test_the_newline_between_messages_comes_with_the_next_text():
    deltas = feed_each([A + "a<|end|>", NEXT + A, "b", "<|end|>"])
    assert [delta.reasoning for delta in deltas] == ["a", "", "\nb", "", ""]


def test_make_id_is_used():
    ids = iter(["first", "second"])
    parser = HarmonyToolParser(make_id=lambda: next(ids))
    text = WEATHER_CALL + "{}<|call|>" + NEXT + WEATHER_CALL + "{}<|call|>"
    assert [call.id for call in stream_tool_parser(parser, [text]).calls] == ["first", "second"]


def test_default_ids():
    calls = stream_tool_parser(HarmonyToolParser(), [WEATHER_CALL + "{}"]).calls
    assert calls[0].id.startswith("call_") and len(calls[0].id) == 29


def test_registry_and_special_tokens():
    assert get_tool_parser("openai") is HarmonyToolParser
    assert get_reasoning_parser("openai_gptoss") is HarmonyReasoningParser
    assert HarmonyToolParser.needs_special_tokens and HarmonyReasoningParser.needs_special_tokens
    assert ReasoningParser.needs_special_tokens is False
    assert get_reasoning_parser("qwen3").needs_special_tokens is False


def test_feed_after_finish_is_an_error_and_finish_is_idempotent():
    for parser in (HarmonyToolParser(), HarmonyReasoningParser()):
        assert parser.feed(A + "x <|").reasoning == "x "
        assert parser.finish().reasoning == "<|"
        assert not parser.finish()
        with pytest.raises(RuntimeError):
            parser.feed("more")


@pytest.mark.parametrize(
    "recipient, name",
    [
        ("functions.get_weather", "get_weather"),
        ("functions.get_weather <|constrain|>json", "get_weather"),
        ("get_weather", "get_weather"),
        ("functions.", None),
        ("", None),
        (None, None),
        ("assistant", None),
        ("python", None),
        ("browser.search", None),
        ("container.exec", None),
        ("<|start|>assistant", None),
    ],
)
def test_function_name(recipient, name):
    assert function_name(recipient) == name


# Generated outputs (hypothesis): valid Harmony in random splittings, and random markup.

BODY = st.text(alphabet="ab xyz{}[]\":,.\n<|>é🌧日", max_size=30)
NAME = st.sampled_from(["get_weather", "get_time", "lookup.v2"])


@st.composite
def harmony_output(draw):
    """(text, reasoning, content, calls, content without calls) of a valid reply."""
    messages = draw(st.lists(st.tuples(st.sampled_from(["analysis", "final", "preamble", "call", "call_first"]),
                                       BODY, NAME), min_size=1, max_size=5))
    text, reasoning, content, gptoss, calls = "", [], [], [], []
    for number, (kind, body, name) in enumerate(messages):
        if number:
            text += NEXT
        if kind == "analysis":
            text += A + body + "<|end|>"
            reasoning.append(body)
        elif kind in ("final", "preamble"):
            channel = "final" if kind == "final" else "commentary"
            text += f"<|channel|>{channel}<|message|>{body}" + ("<|return|>" if kind == "final" else "<|end|>")
            content.append(body)
            gptoss.append(body)
        else:
            header = (f"<|channel|>commentary to=functions.{name} <|constrain|>json" if kind == "call"
                      else f" to=functions.{name}<|channel|>commentary json")
            text += header + "<|message|>" + body + "<|call|>"
            calls.append((name, body))
            gptoss.append(body)
    if draw(st.booleans()):  # the last stop token is often not in the text
        text = text[: text.rindex("<|")]

    def joined(parts):
        return "\n".join(part for part in parts if part) or None

    return text, joined(reasoning), joined(content), calls, joined(gptoss)


@st.composite
def split(draw, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(min_value=1, max_value=max(1, len(text) - 1)), max_size=12)))
    bounds = [0] + [cut for cut in cuts if cut < len(text)] + [len(text)]
    return [text[start:end] for start, end in zip(bounds, bounds[1:])]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_replies_in_random_splittings(data):
    text, reasoning, content, calls, gptoss = data.draw(harmony_output())
    pieces = data.draw(split(text))
    assert stream_tools(pieces) == Result(reasoning, content, calls)
    assert stream_reasoning(pieces) == Result(reasoning, gptoss, [])


MARKUP = st.lists(st.sampled_from([
    "<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|call|>", "<|return|>", "<|constrain|>", "<|endoftext|>",
    "assistant", "user", "analysis", "final", "commentary", " to=functions.f", " to=python", " json", "json",
    "hi", "{}", "<|", "|>", "<", "|", "\n", " ", "é", "🌧", "<|reserved_200000|>", "<|notatoken|>",
]), max_size=25).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_markup_never_raises_and_every_splitting_agrees(data):
    text = data.draw(MARKUP | st.text(max_size=40))
    pieces = data.draw(split(text))
    assert stream_tools(pieces) == stream_tools([text])
    assert stream_reasoning(pieces) == stream_reasoning([text])
    whole = stream_reasoning([text])
    if "<|message|>" not in text:  # no message ever started: all of it is content, untouched
        assert whole == Result(None, text or None, [])


# The vocabulary tool.

def test_vocabulary_has_the_official_hash_and_is_left_alone_when_present(o200k_vocabulary: Path):
    target = o200k_vocabulary / make_o200k_vocab.FILE_NAME
    assert make_o200k_vocab.sha256_of(target) == make_o200k_vocab.SHA256
    modified = target.stat().st_mtime_ns
    assert make_o200k_vocab.make(o200k_vocabulary) == target
    assert target.stat().st_mtime_ns == modified


def test_vocabulary_tool_refuses_a_source_that_is_not_o200k(tmp_path: Path):
    source = make_o200k_vocab.find_source()
    data = bytearray(source.read_bytes())
    data[7] ^= 1  # the first token's byte, "!" becomes a space
    damaged = tmp_path / "o200k.vocab"
    damaged.write_bytes(bytes(data))
    out = tmp_path / "out"
    assert make_o200k_vocab.main(["--out", str(out), "--source", str(damaged)]) == 1
    assert not out.exists()
    damaged.write_bytes(bytes(data[:1000]))
    assert make_o200k_vocab.main(["--out", str(out), "--source", str(damaged)]) == 1
    assert not out.exists()


LOAD = (
    "from openai_harmony import HarmonyEncodingName, load_harmony_encoding\n"
    "encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)\n"
    "print(encoding.encode('<|channel|>final<|message|>Hi', allowed_special='all'))\n"
)


def without_network(command: list[str]) -> list[str]:
    """The command in a network namespace of its own, where that is allowed (root on Linux)."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n", *command]
    return command


def test_openai_harmony_loads_the_vocabulary_from_the_folder_offline(o200k_vocabulary: Path, tmp_path: Path):
    env = {**os.environ, "TIKTOKEN_ENCODINGS_BASE": str(o200k_vocabulary)}
    done = subprocess.run(without_network([sys.executable, "-c", LOAD]), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[200005, 17196, 200008, 12194]"
    # The folder is what is read: an empty one fails.
    env["TIKTOKEN_ENCODINGS_BASE"] = str(tmp_path)
    done = subprocess.run(without_network([sys.executable, "-c", LOAD]), env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "HarmonyError" in done.stderr


# Differential: vLLM's own Harmony parsing (vllm.parser.harmony.HarmonyParser, which its
# Chat Completions serving uses for gpt-oss with reasoning parser openai_gptoss and tool
# parser openai) on the same token ids.

# (sample name, "whole" | "stream") -> why vLLM's result differs from ours.
VLLM_DIFFERENCES = {
    ("two analysis messages are joined with a newline", "stream"):
        "vLLM's stream concatenates the texts of two messages without the newline that its whole-text result "
        "puts between them; ours has the newline both ways.",
    ("the built-in python tool on the analysis channel is reasoning", "stream"):
        "the same: two reasoning messages, concatenated in vLLM's stream.",
}


@pytest.fixture(scope="module")
def vllm_harmony():
    pytest.importorskip("vllm")
    import logging

    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser.harmony import HarmonyParser
    from vllm.reasoning.gptoss_reasoning_parser import GptOssReasoningParser
    from vllm.tool_parsers.gptoss_tool_parser import GptOssToolParser

    from tritonchat.parsers.harmony import harmony_encoding

    class WithTools(HarmonyParser):  # --reasoning-parser openai_gptoss --tool-call-parser openai
        reasoning_parser_cls = GptOssReasoningParser
        tool_parser_cls = GptOssToolParser

    class ReasoningOnly(HarmonyParser):  # --reasoning-parser openai_gptoss
        reasoning_parser_cls = GptOssReasoningParser
        tool_parser_cls = None

    logging.getLogger("vllm").setLevel(logging.CRITICAL)
    request = ChatCompletionRequest(model="gpt-oss", messages=[{"role": "user", "content": "Weather?"}])
    return {"tools": WithTools, "reasoning": ReasoningOnly}, request, harmony_encoding()


def token_chunks(encoding, text: str, seed: int | None) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of the text and (start, end) chunks: one token (seed None) or 1-4 tokens at a
    time, cut only where the decoded prefix is whole characters."""
    ids = encoding.encode(text, allowed_special="all")
    assert encoding.decode(ids) == text
    clean = [end for end in range(1, len(ids) + 1) if _decodes(encoding, ids[:end])]
    rng = random.Random(seed)
    bounds = [0]
    while bounds[-1] < len(ids):
        ahead = [end for end in clean if end > bounds[-1]]
        bounds.append(ahead[0] if seed is None else ahead[min(len(ahead) - 1, rng.randint(0, 3))])
    return ids, list(zip(bounds, bounds[1:]))


def _decodes(encoding, ids: list[int]) -> bool:
    try:
        encoding.decode(ids, errors="strict")
    except UnicodeDecodeError:
        return False
    return True


def comparable_calls(calls) -> list[tuple[str, object]]:
    """(name, arguments parsed as JSON, or the text where it is not JSON)."""
    result = []
    for name, arguments in calls:
        try:
            result.append((name, json.loads(arguments)))
        except json.JSONDecodeError:
            result.append((name, arguments))
    return result


def vllm_whole(parsers, request, encoding, kind: str, text: str) -> Result:
    parser = parsers[kind](encoding, None)
    reasoning, content, calls = parser.parse("", request, model_output_token_ids=encoding.encode(text, allowed_special="all"))
    return Result(reasoning, content, [(call.name, call.arguments) for call in calls or []])


def vllm_stream(parsers, request, encoding, kind: str, text: str, seed: int | None) -> tuple[list[str], Result]:
    """Through vLLM's parse_delta as its serving layer calls it; also the text of each chunk."""
    parser = parsers[kind](encoding, None)
    ids, chunks = token_chunks(encoding, text, seed)
    pieces, reasoning, content, calls = [], "", "", {}
    for number, (start, end) in enumerate(chunks):
        piece = encoding.decode(ids[:end])[len(encoding.decode(ids[:start])):]
        pieces.append(piece)
        delta = parser.parse_delta(piece, ids[start:end], request, finished=number == len(chunks) - 1)
        if delta is None:
            continue
        reasoning += delta.reasoning or ""
        content += delta.content or ""
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, ["", ""])
            if call.function and call.function.name:
                entry[0] = call.function.name
            entry[1] += (call.function.arguments or "") if call.function else ""
    return pieces, Result(reasoning or None, content or None, [tuple(calls[index]) for index in sorted(calls)])


def comparable(result: Result) -> tuple:
    return result.reasoning, result.content, comparable_calls(result.calls)


REALISTIC = [sample for sample in SAMPLES if sample.realistic]


@pytest.mark.parametrize("sample", REALISTIC, ids=[sample.name for sample in REALISTIC])
def test_whole_text_matches_vllm(sample: HarmonySample, vllm_harmony):
    parsers, request, encoding = vllm_harmony
    ours = stream_tools([sample.text])
    assert comparable(ours) == comparable(vllm_whole(parsers, request, encoding, "tools", sample.text))
    if not sample.calls:  # vLLM drops calls without a tool parser, where ours makes them content
        ours = stream_reasoning([sample.text])
        assert comparable(ours) == comparable(vllm_whole(parsers, request, encoding, "reasoning", sample.text))


@pytest.mark.parametrize("sample", REALISTIC, ids=[sample.name for sample in REALISTIC])
def test_stream_matches_vllm(sample: HarmonySample, vllm_harmony):
    parsers, request, encoding = vllm_harmony
    for seed in (None, 1, 2, 3):
        pieces, theirs = vllm_stream(parsers, request, encoding, "tools", sample.text, seed)
        ours = stream_tools(pieces)
        assert ours == Result(sample.reasoning, sample.content, sample.calls)
        if (sample.name, "stream") in VLLM_DIFFERENCES:
            assert comparable_calls(ours.calls) == comparable_calls(theirs.calls)
            continue
        assert comparable(ours) == comparable(theirs), split_description(pieces)
        if not sample.calls:
            _, theirs = vllm_stream(parsers, request, encoding, "reasoning", sample.text, seed)
            assert comparable(stream_reasoning(pieces)) == comparable(theirs), split_description(pieces)
