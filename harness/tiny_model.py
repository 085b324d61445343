"""Build the tiny random-weight chat model that the project serves and tests against.

    python harness/tiny_model.py --out DIR [--force]

The result is an ordinary Hugging Face model directory (Llama architecture, byte-level
BPE tokenizer, ChatML/Qwen3-style chat template with tools and thinking) that loads in
transformers and vLLM. Its weights are random, so its output is gibberish; it exists to
exercise the serving path (tokenization, templating, streaming, stop handling, structured
output) quickly and offline.

The build is deterministic: the same script, corpus and library versions produce
byte-identical files. A stamp file records a hash of those inputs, and a directory that
already holds a complete build with a matching stamp is left alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

CORPUS_PATH = Path(__file__).resolve().with_name("tiny_model_corpus.txt")
STAMP_FILE = ".tiny-model-version"
# Libraries whose version can change the bytes of the build.
RECIPE_LIBRARIES = ("tokenizers", "transformers", "torch", "safetensors")

BOS_TOKEN = "<|begin_of_text|>"
PAD_TOKEN = "<|endoftext|>"
IM_START_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, IM_START_TOKEN, EOS_TOKEN)
# Added as whole tokens but not special, as in Qwen3: they survive
# `decode(..., skip_special_tokens=True)`, so reasoning and tool-call parsers can see them.
MARKUP_TOKENS = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
TOKENIZER_SIZE = 2048
MODEL_MAX_LENGTH = 2048
SEED = 0

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "README.md",
)

# Every tag trims whitespace on both sides and all output is written as string
# expressions, so the result does not depend on the trim_blocks/lstrip_blocks settings
# of whichever Jinja environment renders it.
CHAT_TEMPLATE = r"""
{#- ChatML-style template of the tritonchat tiny test model (Qwen3 conventions). -#}
{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content -%}
            {%- if part.type != "text" -%}
                {{- raise_exception("Only text content parts are supported, got type: " ~ part.type) -}}
            {%- endif -%}
            {{- ("\n" if not loop.first else "") ~ part.text -}}
        {%- endfor -%}
    {%- elif content is defined and content is not none -%}
        {{- raise_exception("Message content must be a string or a list of content parts.") -}}
    {%- endif -%}
{%- endmacro -%}

{{- bos_token -}}

{%- set has_system_message = messages and messages[0].role in ["system", "developer"] -%}
{%- if tools or has_system_message -%}
    {{- "<|im_start|>system\n" -}}
    {%- if has_system_message -%}
        {{- render_content(messages[0].content) -}}
        {%- if tools -%}
            {{- "\n\n" -}}
        {%- endif -%}
    {%- endif -%}
    {%- if tools -%}
        {{- "# Tools\n\n"
            "You may call the functions described below. "
            "Each function is given as a JSON object inside <tools></tools>:\n"
            "<tools>" -}}
        {%- for tool in tools -%}
            {{- "\n" ~ (tool | tojson) -}}
        {%- endfor -%}
        {{- "\n</tools>\n\n"
            "To call a function, answer with a JSON object holding its name and arguments "
            "inside <tool_call></tool_call> tags, one block per call:\n"
            "<tool_call>\n"
            "{\"name\": <function-name>, \"arguments\": <arguments-json-object>}\n"
            "</tool_call>" -}}
    {%- endif -%}
    {{- "<|im_end|>\n" -}}
{%- endif -%}

{%- for message in messages -%}
    {%- if loop.first and has_system_message -%}
        {#- Already rendered as the system turn above. -#}
    {%- elif message.role in ["system", "developer", "user"] -%}
        {{- "<|im_start|>" ~ ("system" if message.role == "developer" else message.role) ~ "\n" -}}
        {{- render_content(message.content) ~ "<|im_end|>\n" -}}
    {%- elif message.role == "assistant" -%}
        {%- set content = render_content(message.content) -%}
        {%- set reasoning = message.reasoning_content if message.reasoning_content is string else message.reasoning -%}
        {{- "<|im_start|>assistant\n" -}}
        {%- if reasoning is string and reasoning -%}
            {{- "<think>\n" ~ reasoning.strip("\n") ~ "\n</think>\n\n" -}}
        {%- endif -%}
        {{- content -}}
        {%- for tool_call in message.tool_calls or [] -%}
            {%- set call = tool_call.function if tool_call.function is defined else tool_call -%}
            {%- if content or not loop.first -%}
                {{- "\n" -}}
            {%- endif -%}
            {{- "<tool_call>\n{\"name\": " ~ (call.name | tojson) ~ ", \"arguments\": " -}}
            {%- if call.arguments is string -%}
                {{- call.arguments -}}
            {%- else -%}
                {{- call.arguments | tojson -}}
            {%- endif -%}
            {{- "}\n</tool_call>" -}}
        {%- endfor -%}
        {{- "<|im_end|>\n" -}}
    {%- elif message.role == "tool" -%}
        {%- if loop.first or loop.previtem.role != "tool" -%}
            {{- "<|im_start|>user" -}}
        {%- endif -%}
        {{- "\n<tool_response>\n" ~ render_content(message.content) ~ "\n</tool_response>" -}}
        {%- if loop.last or loop.nextitem.role != "tool" -%}
            {{- "<|im_end|>\n" -}}
        {%- endif -%}
    {%- else -%}
        {{- raise_exception("Unknown message role '" ~ message.role ~ "': "
                            "expected system, developer, user, assistant or tool.") -}}
    {%- endif -%}
{%- endfor -%}

{%- if add_generation_prompt -%}
    {{- "<|im_start|>assistant\n" -}}
    {%- if enable_thinking is defined and not enable_thinking -%}
        {{- "<think>\n\n</think>\n\n" -}}
    {%- endif -%}
{%- endif -%}
""".strip() + "\n"

README = f"""\
# tritonchat tiny test model

A tiny Llama-architecture chat model with **random weights**, generated by
`harness/tiny_model.py` in the tritonchat repository. It is not trained and produces
gibberish; it exists so the serving stack (tokenization, chat template, tools, thinking,
streaming, structured output) can be tested quickly on a CPU without downloading anything.

- Architecture: Llama, 2 layers, hidden size 128, 2 attention heads of size 64, 1 KV head,
  float32, about 0.8 M parameters.
- Tokenizer: byte-level BPE with {TOKENIZER_SIZE} tokens trained on
  `harness/tiny_model_corpus.txt`. It adds `{BOS_TOKEN}` when encoding with special tokens,
  and the chat template also starts with it, so re-tokenizing a rendered prompt with
  special tokens doubles the BOS.
- Special tokens: `{BOS_TOKEN}` (BOS), `{EOS_TOKEN}` (EOS), `{PAD_TOKEN}` (pad),
  `{IM_START_TOKEN}`. Added, non-special tokens: {", ".join(f"`{t}`" for t in MARKUP_TOKENS)}.
- Chat template: ChatML with Qwen3/Hermes-style tools (`<tools>`, `<tool_call>`,
  `<tool_response>`), `reasoning_content` rendered as `<think>` blocks, and
  `enable_thinking=False` support.

Rebuild with `python harness/tiny_model.py --out DIR`; the build is deterministic.
"""


def recipe_stamp() -> str:
    """Hash of everything that determines the bytes of the build."""
    digest = hashlib.sha256()
    digest.update(Path(__file__).resolve().read_bytes())
    digest.update(CORPUS_PATH.read_bytes())
    for library in RECIPE_LIBRARIES:
        digest.update(f"{library}=={metadata.version(library)}\n".encode())
    return digest.hexdigest()


def is_complete_build(out_dir: Path, stamp: str) -> bool:
    stamp_path = out_dir / STAMP_FILE
    return (
        stamp_path.is_file()
        and stamp_path.read_text(encoding="utf-8").strip() == stamp
        and all((out_dir / name).is_file() for name in MODEL_FILES)
    )


def synthetic_tool_texts(rng: random.Random, count: int) -> Iterator[str]:
    """Tool definitions, calls and results in the JSON shapes of tool-use prompts.

    Without these the tokenizer would spell out every quote and brace of such prompts.
    """
    tools = {
        "get_weather": {"city": ["Oslo", "Lisbon", "Nairobi", "Osaka", "Lima"], "unit": ["celsius", "fahrenheit"]},
        "search_library": {"query": ["bread recipes", "train timetables", "lighthouses"], "max_results": [3, 5, 10]},
        "convert_currency": {"amount": [12.5, 100, 2048], "from": ["EUR", "USD", "JPY"], "to": ["GBP", "CNY"]},
        "book_table": {"restaurant": ["Harbor Kitchen", "Green Door"], "people": [2, 4, 6], "time": ["19:30", "20:00"]},
    }
    for name, parameters in tools.items():
        schema = {
            "type": "object",
            "properties": {
                key: {"type": "number" if isinstance(values[0], (int, float)) else "string"}
                for key, values in parameters.items()
            },
            "required": list(parameters),
        }
        definition = {"name": name, "description": f"Call {name.replace('_', ' ')}.", "parameters": schema}
        yield json.dumps({"type": "function", "function": definition}, ensure_ascii=False)
    names = sorted(tools)
    for _ in range(count):
        name = rng.choice(names)
        arguments = {key: rng.choice(values) for key, values in tools[name].items()}
        yield json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        yield json.dumps({"result": rng.choice(["ok", "sunny", "not found"]), "id": rng.randrange(10_000)})


def training_texts() -> list[str]:
    corpus = CORPUS_PATH.read_text(encoding="utf-8")
    paragraphs = [p for p in corpus.split("\n\n") if p.strip()]
    return paragraphs + list(synthetic_tool_texts(random.Random(SEED), count=300))


def train_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    # No normalizer, and no prefix space: any UTF-8 text must round-trip exactly.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_SIZE - len(MARKUP_TOKENS),
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_texts(), trainer=trainer)
    # Added after training because the trainer marks everything it is given as special.
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in MARKUP_TOKENS])
    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN}:1 $B:1",
        special_tokens=[(BOS_TOKEN, bos_id)],
    )
    assert tokenizer.get_vocab_size() == TOKENIZER_SIZE, tokenizer.get_vocab_size()
    return tokenizer


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_tokenizer(tokenizer, out_dir: Path) -> None:
    tokenizer.save(str(out_dir / "tokenizer.json"))
    # transformers 5 prefers chat_template.jinja over the config entry; older readers
    # (and some tools) only look at tokenizer_config.json, so both carry the template.
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    write_json(
        out_dir / "tokenizer_config.json",
        {
            # The generic class loads tokenizer.json as is. Model-specific classes do not in
            # transformers 5: LlamaTokenizer(Fast) swaps in a Metaspace pre-tokenizer, which
            # breaks byte-level text.
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "pad_token": PAD_TOKEN,
            # Documents what tokenizer.json's post-processor does; transformers ignores it
            # when a tokenizer.json is present.
            "add_bos_token": True,
            "add_eos_token": False,
            "model_max_length": MODEL_MAX_LENGTH,
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
        },
    )


def write_model(out_dir: Path, tokenizer) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    token_ids = {
        "bos_token_id": tokenizer.token_to_id(BOS_TOKEN),
        "eos_token_id": tokenizer.token_to_id(EOS_TOKEN),
        "pad_token_id": tokenizer.token_to_id(PAD_TOKEN),
    }
    config = LlamaConfig(
        vocab_size=-(-tokenizer.get_vocab_size() // 64) * 64,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,  # vLLM's CPU attention does not accept smaller heads
        max_position_embeddings=MODEL_MAX_LENGTH,
        tie_word_embeddings=False,
        dtype="float32",
        **token_ids,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out_dir)
    # Written by hand so it holds nothing but the token ids: vLLM takes its default
    # sampling parameters from this file.
    write_json(out_dir / "generation_config.json", token_ids)


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def build(out_dir: Path, force: bool = False) -> bool:
    """Build the model into out_dir. Returns False if an up-to-date build was already there."""
    stamp = recipe_stamp()
    if not force and is_complete_build(out_dir, stamp):
        return False
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / STAMP_FILE).unlink(missing_ok=True)
    # Build next to the target and move the files in one by one, stamp last, so a reader
    # never sees a stamped but incomplete directory and concurrent builds cannot clash.
    staging = Path(tempfile.mkdtemp(prefix=".tiny-model-build-", dir=out_dir.parent))
    try:
        tokenizer = train_tokenizer()
        write_tokenizer(tokenizer, staging)
        write_model(staging, tokenizer)
        (staging / "README.md").write_text(README, encoding="utf-8")
        (staging / STAMP_FILE).write_text(stamp + "\n", encoding="utf-8")
        file_mode = 0o666 & ~current_umask()  # save_pretrained leaves the weights owner-only
        for name in (*MODEL_FILES, STAMP_FILE):
            os.chmod(staging / name, file_mode)
            os.replace(staging / name, out_dir / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write the model into")
    parser.add_argument("--force", action="store_true", help="rebuild even if DIR holds an up-to-date build")
    args = parser.parse_args(argv)

    started = time.monotonic()
    out_dir = args.out.resolve()
    if build(out_dir, force=args.force):
        print(f"built tiny model in {out_dir} ({time.monotonic() - started:.1f} s)")
    else:
        print(f"tiny model in {out_dir} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
