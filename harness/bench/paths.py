"""The paths a run compares, each doing the same work, and the requests they send.

Two pairs: `vllm` (the tiny chat model on the local vLLM backend) and `scripted` (a fake engine
emitting one token every `--scripted-interval-ms`). In each: `raw` = the generation model called
with the prompt `openai_chat` would render; `chat <transport>` = `openai_chat` in front of it,
one per transport (and per `--variant`, per `--stream-intervals` value); on the vLLM pair,
`chat inprocess` = `openai_chat` with its own vLLM engine on the same engine arguments
(`engine: inprocess`; `--no-inprocess` leaves it out) and, with `--vllm-server`, `vllm serve` =
vLLM's own OpenAI server with the same chat request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness import BUILD, ROOT
from harness.bench.load import Target

DEFAULT_TOKENIZER = BUILD / "tiny-chat"
VLLM_PROMPT = "Tell me a long story about a lighthouse keeper and the ships she guided home."
VLLM_SERVE = "vllm serve"  # vLLM's own OpenAI server on the same model
INPROCESS = "chat inprocess"  # openai_chat with its own engine (engine: inprocess) on the same model


def make_tiny_model(tokenizer: Path) -> None:
    """Builds the tiny chat model (once: a complete build is left alone) when `tokenizer` is it."""
    if tokenizer == DEFAULT_TOKENIZER.resolve():
        subprocess.run([sys.executable, str(ROOT / "harness" / "tiny_model.py"), "--out", str(tokenizer)],
                       check=True, stdout=sys.stderr)


# ---- request bodies (pure) ----------------------------------------------------------------------


def chat_request(content: str, max_tokens: int) -> dict:
    return {
        "messages": [{"role": "user", "content": content}],
        "max_completion_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def generate_body(request: dict | str) -> dict:
    """The body of a `generate`/`generate_stream` call of `openai_chat`: the chat request (or its
    JSON text) in its `request` input."""
    return {"request": request if isinstance(request, str) else json.dumps(request)}


def raw_body(prompt: str, max_tokens: int) -> dict:
    """What `openai_chat` itself sends the generation model for `chat_request(...)` (see formats/vllm.py)."""
    sampling = {"max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    return {
        "text_input": prompt,
        "stream": True,
        "exclude_input_in_output": True,
        "sampling_parameters": json.dumps(sampling),
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }


def scripted_content(max_tokens: int, interval_ms: float) -> str:
    """The message that makes the scripted engine emit `tok ` `max_tokens` times, one every `interval_ms`."""
    return "SCRIPT:" + json.dumps({"repeat": {"text": "tok ", "count": max_tokens}, "interval_ms": interval_ms})


class Renderer:
    """Renders a chat request exactly as `openai_chat` does (same parser, template code, BOS rule)."""

    def __init__(self, tokenizer_path: Path, content_format: str = "auto"):
        from tritonchat.template import PromptRenderer, load_tokenizer  # noqa: PLC0415  (heavy)

        self._renderer = PromptRenderer(load_tokenizer(str(tokenizer_path)), content_format)

    def __call__(self, request: dict) -> str:
        from tritonchat.protocol import parse_chat_request  # noqa: PLC0415

        return self._renderer.render(parse_chat_request(json.dumps(request))).text


# ---- the paths of a run -------------------------------------------------------------------------


def chat_model_name(args, pair: str, transport: str) -> str:
    """The chat model of a pair for one transport: the plain name when only one transport runs."""
    base = args.chat_model if pair == "vllm" else args.chat_scripted_model
    return base if len(args.transports) == 1 else f"{base}_{transport}"


def inprocess_model_name(args) -> str:
    """The chat model with its own engine (the vLLM pair's `chat inprocess`)."""
    return f"{args.chat_model}_inprocess"


def variant_model_name(args, pair: str, label: str) -> str:
    """The chat model of a `--variant` (the first transport, the variant's parameters)."""
    return f"{chat_model_name(args, pair, args.transports[0])}_{label}"


def build_targets(args, renderer: Renderer) -> list[list[Target]]:
    """Per selected pair: raw first, then `openai_chat` over each transport (and with each stream
    interval, over the first transport), then on the vLLM pair `openai_chat` with its own engine
    and vLLM's own server; all doing the same work."""
    groups = []
    for pair in args.paths:
        if pair == "vllm":
            content, raw_model = VLLM_PROMPT, args.raw_model
        else:
            content, raw_model = scripted_content(args.max_tokens, args.scripted_interval_ms), args.raw_scripted_model
        chat = chat_request(content, args.max_tokens)
        group = [Target(pair, "raw", raw_model, raw_body(renderer(chat), args.max_tokens))]
        for transport in args.transports:
            group.append(Target(pair, f"chat {transport}", chat_model_name(args, pair, transport),
                                generate_body(chat)))
        for label, _parameters in args.variant:
            transport = args.transports[0]
            group.append(Target(pair, f"chat {transport} {label}", variant_model_name(args, pair, label),
                                generate_body(chat)))
        for interval in args.stream_intervals:
            transport = args.transports[0]
            request = {**chat, "stream_interval": interval}
            group.append(Target(pair, f"chat {transport} si={interval}", chat_model_name(args, pair, transport),
                                generate_body(request)))
        if pair == "vllm" and args.inprocess:
            group.append(Target(pair, INPROCESS, inprocess_model_name(args), generate_body(chat)))
        if pair == "vllm" and args.vllm_server:
            group.append(Target(pair, VLLM_SERVE, "tiny-chat", {"model": "tiny-chat", **chat},
                                url=f"{args.vllm_server}/v1/chat/completions" if args.vllm_server != "start" else ""))
        groups.append(group)
    return groups
