"""`tritonchat`: chat with `openai_chat` from a terminal.

    tritonchat chat "Tell me a story" --max-tokens 64       # one answer, printed as it arrives
    echo "Summarize this" | tritonchat chat --system "Be brief"
    tritonchat chat "Hi" --json                              # the raw chat.completion.chunk objects
    tritonchat chat                                          # interactive: the conversation is kept

Reasoning (from a reasoning parser) is printed apart from the answer, dimmed on a terminal and
marked `[reasoning]`; tool calls are printed as `[tool call] name({...})`. In interactive mode
Ctrl-C stops the answer being written (the request is cancelled) and Ctrl-D or `/exit` leaves;
`/reset` forgets the conversation.

Needs the `client` extra (`openai`; `--protocol grpc` also the `grpc` extra); without it the
command says which extra to install and exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, TextIO

from .extras import require

if TYPE_CHECKING:
    from .chat import TritonChat

DIM, RESET = "\033[2m", "\033[0m"


class Printer:
    """Writes one streamed answer: reasoning apart from content, tool calls readably."""

    def __init__(self, out: TextIO, color: bool):
        self.out = out
        self.color = color
        self.section = ""  # "", "reasoning" or "content"
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}

    def _enter(self, section: str) -> None:
        if section == self.section:
            return
        if self.section == "reasoning":
            self.out.write((RESET if self.color else "") + "\n")
        if section == "reasoning":
            self.out.write("[reasoning] " + (DIM if self.color else ""))
        self.section = section

    def delta(self, delta) -> None:
        reasoning = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
        extra = getattr(delta, "model_extra", None) or {}
        reasoning = reasoning or extra.get("reasoning_content") or extra.get("reasoning")
        if reasoning:
            self._enter("reasoning")
            self.out.write(reasoning)
        if delta.content:
            self._enter("content")
            self.out.write(delta.content)
            self.content.append(delta.content)
        for call in delta.tool_calls or []:
            entry = self.calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
            entry["id"] = call.id or entry["id"]
            if call.function is not None:
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
        self.out.flush()

    def finish(self, reason: str | None) -> None:
        self._enter("")
        if self.content:
            self.out.write("\n")
        for entry in self.calls.values():
            try:
                arguments = json.dumps(json.loads(entry["arguments"]), ensure_ascii=False)
            except ValueError:
                arguments = entry["arguments"]
            self.out.write(f"[tool call] {entry['name']}({arguments})\n")
        if reason not in (None, "stop", "tool_calls"):
            self.out.write(f"[finish_reason: {reason}]\n")
        self.out.flush()

    def message(self) -> dict[str, Any]:
        """The assistant message to keep in the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.calls:
            message["tool_calls"] = [
                {"id": e["id"] or f"call_{i}", "type": "function",
                 "function": {"name": e["name"], "arguments": e["arguments"]}}
                for i, e in self.calls.items()]
        return message


def request_fields(args) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if args.model:
        fields["model"] = args.model
    for name in ("temperature", "top_p", "seed", "n"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    if args.max_tokens is not None:
        fields["max_completion_tokens"] = args.max_tokens
    if args.stop:
        fields["stop"] = args.stop
    if args.tools:
        with open(args.tools) as f:
            fields["tools"] = json.load(f)
    if args.body:
        fields.update(json.loads(args.body))
    return fields


def answer(client: TritonChat, messages: list[dict], args, out: TextIO) -> dict[str, Any] | None:
    """Stream one answer to `out`; returns the assistant message (None with `-n` > 1 or --json)."""
    fields = request_fields(args)
    stream = client.chat.completions.create(messages=messages, stream=True, **fields)
    choices = fields.get("n", 1)
    printers = {i: Printer(out if choices == 1 else _Buffer(), args.color) for i in range(choices)}
    finish: dict[int, str | None] = {}
    try:
        for chunk in stream:
            if args.json:
                out.write(chunk.model_dump_json(exclude_unset=True) + "\n")
                out.flush()
                continue
            for choice in chunk.choices:
                printers[choice.index].delta(choice.delta)
                if choice.finish_reason:
                    finish[choice.index] = choice.finish_reason
    finally:
        stream.close()
    if args.json:
        return None
    for index, printer in printers.items():
        if choices > 1:  # each choice was written to its own buffer; now one after another
            out.write(f"--- choice {index} ---\n" + "".join(printer.out.parts))
            printer.out = out
        printer.finish(finish.get(index))
    return printers[0].message() if choices == 1 else None


class _Buffer:
    """Where a choice is written while `-n` choices stream interleaved."""

    def __init__(self):
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    def flush(self) -> None:
        pass


def interactive(client: TritonChat, args, out: TextIO) -> int:
    import openai  # noqa: PLC0415  (the `client` extra, checked by `main`)

    history: list[dict] = [{"role": "system", "content": args.system}] if args.system else []
    system = list(history)
    out.write("tritonchat: Ctrl-C stops an answer, Ctrl-D or /exit leaves, /reset starts over.\n")
    while True:
        try:
            line = input("you> ")
        except EOFError:
            out.write("\n")
            return 0
        except KeyboardInterrupt:
            out.write("\n")
            return 0
        text = line.strip()
        if not text:
            continue
        if text == "/exit":
            return 0
        if text == "/reset":
            history = list(system)
            out.write("(conversation reset)\n")
            continue
        history.append({"role": "user", "content": line})
        out.write("assistant> ")
        out.flush()
        try:
            message = answer(client, history, args, out)
        except KeyboardInterrupt:
            out.write("\n[stopped]\n")
            history.pop()
            continue
        except openai.APIStatusError as error:
            out.write(f"\nerror ({error.status_code}): {error.message}\n")
            history.pop()
            continue
        if message is not None:
            history.append(message)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tritonchat", description="Chat with openai_chat on a Triton server.")
    commands = parser.add_subparsers(dest="command", required=True)
    chat = commands.add_parser("chat", help="one answer, or an interactive conversation without a prompt")
    chat.add_argument("prompt", nargs="?", help="the user message; '-' or none with a pipe: read stdin")
    chat.add_argument("--url", default=None, help="server address (default: localhost:8000 for http, :8001 for grpc)")
    chat.add_argument("--protocol", choices=("http", "grpc"), default="http")
    chat.add_argument("--triton-model", default="openai_chat", help="the Triton model to call")
    chat.add_argument("--model", help="the served model name (`model` in the request)")
    chat.add_argument("--system", help="a system message")
    chat.add_argument("--max-tokens", type=int)
    chat.add_argument("--temperature", type=float)
    chat.add_argument("--top-p", dest="top_p", type=float)
    chat.add_argument("--seed", type=int)
    chat.add_argument("-n", type=int, help="number of choices")
    chat.add_argument("--stop", action="append", help="a stop string (repeatable)")
    chat.add_argument("--tools", help="a JSON file with the `tools` list")
    chat.add_argument("--body", help="more request fields, as a JSON object")
    chat.add_argument("--json", action="store_true", help="print the raw chunks, one JSON object per line")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    require("client", "tritonchat")
    if args.protocol == "grpc":
        require("grpc", "tritonchat --protocol grpc")
    import openai  # noqa: PLC0415  (the `client` extra)

    from .chat import TritonChat  # noqa: PLC0415

    args.color = sys.stdout.isatty()
    url = args.url or ("localhost:8001" if args.protocol == "grpc" else "localhost:8000")
    out = sys.stdout
    with TritonChat(url, protocol=args.protocol, chat_model=args.triton_model) as client:
        prompt = args.prompt
        if prompt is None and sys.stdin.isatty():
            return interactive(client, args, out)
        if prompt in (None, "-"):
            prompt = sys.stdin.read()
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": prompt}]
        try:
            answer(client, messages, args, out)
        except openai.APIStatusError as error:
            print(f"error ({error.status_code}): {error.message}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("\n[stopped]", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
