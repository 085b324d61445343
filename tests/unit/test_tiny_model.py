"""The tiny test model built by harness/tiny_model.py: determinism, tokenizer, chat template."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
jinja2 = pytest.importorskip("jinja2")

MAKE_TINY_MODEL = Path(__file__).resolve().parents[2] / "harness" / "tiny_model.py"

BOS = "<|begin_of_text|>"
EXPECTED_FILES = {
    ".tiny-model-version",
    "README.md",
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TOOLS_SYSTEM_TEXT = (
    "# Tools\n\n"
    "You may call the functions described below. Each function is given as a JSON object"
    " inside <tools></tools>:\n"
    "<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Current weather'
    ' for a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},'
    ' "required": ["city"]}}}\n'
    "</tools>\n\n"
    "To call a function, answer with a JSON object holding its name and arguments inside"
    " <tool_call></tool_call> tags, one block per call:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <arguments-json-object>}\n'
    "</tool_call>"
)

FULL_CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Oslo and Lima?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                # A string is emitted exactly as given, spacing included.
                "function": {"name": "get_weather", "arguments": '{"city":  "Oslo"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Lima"}},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "-3 °C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "21 °C"},
    {"role": "assistant", "reasoning_content": "\nCold and warm.\n", "content": "Oslo -3 °C, Lima 21 °C."},
    {"role": "user", "content": "Thanks!"},
]


def build(out_dir: Path, *extra_args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(MAKE_TINY_MODEL), "--out", str(out_dir), *extra_args],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout


def file_hashes(directory: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in directory.iterdir()}


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out_dir = tmp_path_factory.mktemp("tiny-model")
    build(out_dir)
    return out_dir


@pytest.fixture(scope="session")
def fresh_tokenizer(model_dir: Path):
    """The tokenizer of a model made afresh by this test module (not the one made at setup)."""
    return transformers.AutoTokenizer.from_pretrained(model_dir)


def render(tokenizer, messages, **kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)


def test_build_is_deterministic_and_replaces_stale_builds(model_dir: Path, tmp_path: Path) -> None:
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    (second_dir / ".tiny-model-version").write_text("an older recipe\n")
    (second_dir / "model.safetensors").write_bytes(b"stale weights")
    assert "built" in build(second_dir)
    first, second = file_hashes(model_dir), file_hashes(second_dir)
    assert set(first) == EXPECTED_FILES
    assert first == second


def test_up_to_date_build_is_left_alone(model_dir: Path) -> None:
    weights = model_dir / "model.safetensors"
    mtime_before = weights.stat().st_mtime_ns
    assert "up to date" in build(model_dir)
    assert weights.stat().st_mtime_ns == mtime_before


def test_configs(model_dir: Path, fresh_tokenizer) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["head_dim"] == config["hidden_size"] // config["num_attention_heads"] == 64
    assert config["vocab_size"] % 64 == 0 and config["vocab_size"] >= len(fresh_tokenizer) == 2048
    assert config["tie_word_embeddings"] is False
    generation_config = json.loads((model_dir / "generation_config.json").read_text())
    assert generation_config == {
        "bos_token_id": fresh_tokenizer.bos_token_id,
        "eos_token_id": fresh_tokenizer.eos_token_id,
        "pad_token_id": fresh_tokenizer.pad_token_id,
    }
    # Both places carry the same template; transformers 5 reads the .jinja file.
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["chat_template"] == (model_dir / "chat_template.jinja").read_text()
    assert fresh_tokenizer.chat_template == tokenizer_config["chat_template"]


def test_special_tokens(fresh_tokenizer) -> None:
    assert fresh_tokenizer.bos_token == BOS
    assert fresh_tokenizer.eos_token == "<|im_end|>"
    assert fresh_tokenizer.pad_token == "<|endoftext|>"
    assert len({fresh_tokenizer.bos_token_id, fresh_tokenizer.eos_token_id, fresh_tokenizer.pad_token_id}) == 3
    for token in (
        "<|im_start|>",
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
    ):
        assert len(fresh_tokenizer.encode(token, add_special_tokens=False)) == 1, token


def test_model_runs(model_dir: Path, fresh_tokenizer) -> None:
    import torch

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    input_ids = torch.tensor([fresh_tokenizer.encode("Hello there")])
    with torch.no_grad():
        logits = model(input_ids).logits
    assert logits.shape == (1, input_ids.shape[1], model.config.vocab_size)


def test_round_trip_preserves_text(fresh_tokenizer) -> None:
    text = "  leading spaces, 中文, emoji 🎉"
    ids = fresh_tokenizer.encode(text, add_special_tokens=False)
    assert fresh_tokenizer.decode(ids) == text
    assert fresh_tokenizer.decode(fresh_tokenizer.encode(text)) == BOS + text


def test_bos_added_when_encoding_with_special_tokens(fresh_tokenizer) -> None:
    assert fresh_tokenizer.encode("hi")[0] == fresh_tokenizer.bos_token_id
    assert fresh_tokenizer.bos_token_id not in fresh_tokenizer.encode("hi", add_special_tokens=False)


def test_skip_special_tokens_keeps_markup_tokens(fresh_tokenizer) -> None:
    ids = fresh_tokenizer.encode("<think>\nhmm\n</think>\n\nHi<|im_end|>", add_special_tokens=False)
    assert fresh_tokenizer.decode(ids, skip_special_tokens=True) == "<think>\nhmm\n</think>\n\nHi"
    assert fresh_tokenizer.decode(ids, skip_special_tokens=False).endswith("Hi<|im_end|>")


def test_full_conversation(fresh_tokenizer) -> None:
    messages = FULL_CONVERSATION
    expected = (
        f"{BOS}<|im_start|>system\nYou are terse.\n\n{TOOLS_SYSTEM_TEXT}<|im_end|>\n"
        "<|im_start|>user\nWeather in Oslo and Lima?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city":  "Oslo"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lima"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n"
        "<tool_response>\n-3 °C\n</tool_response>\n"
        "<tool_response>\n21 °C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\nCold and warm.\n</think>\n\nOslo -3 °C, Lima 21 °C.<|im_end|>\n"
        "<|im_start|>user\nThanks!<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    rendered = render(fresh_tokenizer, messages, tools=[WEATHER_TOOL], add_generation_prompt=True, enable_thinking=False)
    assert rendered == expected
    assert rendered.count(BOS) == 1
    # The deliberate trap: re-tokenizing the rendered prompt with special tokens doubles BOS.
    assert fresh_tokenizer.encode(rendered)[:2] == [fresh_tokenizer.bos_token_id] * 2
    assert fresh_tokenizer.encode(rendered, add_special_tokens=False).count(fresh_tokenizer.bos_token_id) == 1


def test_rendering_does_not_depend_on_jinja_whitespace_settings(model_dir: Path, fresh_tokenizer) -> None:
    """A plain Jinja environment (no trim_blocks/lstrip_blocks) renders the same text."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment()
    environment.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    template = environment.from_string((model_dir / "chat_template.jinja").read_text())
    kwargs = {"tools": [WEATHER_TOOL], "add_generation_prompt": True, "enable_thinking": False}
    plain = template.render(messages=FULL_CONVERSATION, bos_token=BOS, **kwargs)
    assert plain == render(fresh_tokenizer, FULL_CONVERSATION, **kwargs)


def test_reasoning_alias(fresh_tokenizer) -> None:
    """vLLM passes assistant reasoning as `reasoning` (and as `reasoning_content`)."""
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "reasoning": "Hmm.", "content": "Hello."}]
    assert render(fresh_tokenizer, messages).endswith("<|im_start|>assistant\n<think>\nHmm.\n</think>\n\nHello.<|im_end|>\n")


def test_tools_without_system_message_get_a_system_turn(fresh_tokenizer) -> None:
    rendered = render(fresh_tokenizer, [{"role": "user", "content": "Hi"}], tools=[WEATHER_TOOL])
    assert rendered == f"{BOS}<|im_start|>system\n{TOOLS_SYSTEM_TEXT}<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"


def test_assistant_content_followed_by_tool_call(fresh_tokenizer) -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
    ]
    assert render(fresh_tokenizer, messages) == (
        f"{BOS}<|im_start|>user\nHi<|im_end|>\n"
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n'
    )


def test_content_parts_developer_role_and_thinking_switch(fresh_tokenizer) -> None:
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "One"}, {"type": "text", "text": "Two 🎉"}]},
    ]
    prefix = f"{BOS}<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nOne\nTwo 🎉<|im_end|>\n"
    assert render(fresh_tokenizer, messages, add_generation_prompt=True) == prefix + "<|im_start|>assistant\n"
    assert render(fresh_tokenizer, messages, add_generation_prompt=True, enable_thinking=True) == (
        prefix + "<|im_start|>assistant\n"
    )
    assert render(fresh_tokenizer, messages, add_generation_prompt=False, enable_thinking=False) == prefix


def test_later_system_message_renders_in_place(fresh_tokenizer) -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "developer", "content": "Switch to French."}]
    assert render(fresh_tokenizer, messages) == (
        f"{BOS}<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nSwitch to French.<|im_end|>\n"
    )


def test_unknown_role_raises(fresh_tokenizer) -> None:
    with pytest.raises(jinja2.exceptions.TemplateError, match="Unknown message role 'narrator'"):
        render(fresh_tokenizer, [{"role": "narrator", "content": "Once upon a time"}])


def test_non_text_content_part_raises(fresh_tokenizer) -> None:
    image_part = {"type": "image_url", "image_url": {"url": "data:,"}}
    with pytest.raises(jinja2.exceptions.TemplateError, match="Only text content parts"):
        render(fresh_tokenizer, [{"role": "user", "content": [image_part]}])
