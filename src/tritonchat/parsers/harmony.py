"""gpt-oss output in OpenAI's Harmony format: reasoning, content and tool calls.

gpt-oss writes a sequence of messages, each with a header and a body. After a prompt that
ends in `<|start|>assistant` a reply looks like

    <|channel|>analysis<|message|>User asks for the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Oslo"}<|call|>

(one line here, one text in reality), or ends with a `final` message instead of a call:
`...<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>`. The markers are
special tokens, so the engine must keep them in the text (skip_special_tokens=false).
`<|return|>` and `<|call|>` are stop tokens and may be missing at the end.

The text is read with `openai_harmony`'s `StreamableParser`: each piece is encoded with
the Harmony encoding, special tokens allowed, and fed to it token by token. A trailing
`<|...` that may still become a special token is held back until it is complete, so a
marker split across pieces is never encoded as ordinary text.

What each message becomes, as vLLM's Harmony parsing does for Chat Completions:

- a recipient that names a function (`to=functions.NAME`, or a bare `to=NAME` other than
  `assistant` and the built-in tools python, browser.* and container.*), on any channel:
  a tool call NAME whose arguments are the message text, streamed as the model writes it
  (announced, with its id and name, when the body starts). The recipient may stand
  before or after the channel in the header.
- the `analysis` channel: reasoning.
- everything else, the `final` channel and `commentary` without a recipient (a preamble,
  meant for the user) in particular: content.

The texts of several messages of the same kind are joined with a newline, as in vLLM's
non-streaming result; streamed, the newline comes with the first text of the next one.

Where we differ from vLLM on purpose, nothing is dropped:
- With calls disabled (the `openai_gptoss` reasoning parser, used alone), the text of a
  call message is content; vLLM drops calls when no tool parser is configured.
- Messages vLLM ignores (to a built-in tool on a non-analysis channel, an unknown channel,
  a non-assistant author) are content.
- Output that is not valid Harmony (a header that does not parse, text between messages,
  output cut off inside a header) is not an error: everything from the start of the
  message that failed to the end of the output is content, markers included. vLLM skips
  the offending tokens and keeps only the unfinished message.
- Arguments are the model's own text; vLLM re-serialises them with json.dumps when the
  whole text is parsed at once.

`openai_harmony` needs the o200k vocabulary. Upstream `openai-harmony` downloads it at
first use unless TIKTOKEN_ENCODINGS_BASE names a folder holding `o200k_base.tiktoken`
(harness/o200k.py writes one); the `oss-harmony` fork that vLLM 0.32 installs
carries it inside, and reads that folder instead when the variable is set.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base import ReasoningParser, ToolParser, register_reasoning_parser, register_tool_parser

if TYPE_CHECKING:
    from openai_harmony import HarmonyEncoding, StreamableParser

BUILTIN_TOOLS = frozenset({"python", "browser", "container"})
FUNCTIONS_PREFIX = "functions."
_REASONING, _CONTENT, _CALL = "reasoning", "content", "call"


@functools.cache
def harmony_encoding() -> HarmonyEncoding:
    """The gpt-oss Harmony encoding (loaded once per process)."""
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding  # noqa: PLC0415 (optional dependency)

    try:
        return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    except Exception as error:  # noqa: BLE001 - HarmonyError and friends
        raise RuntimeError(
            f"cannot load the Harmony (o200k) vocabulary: {error}. Offline, point TIKTOKEN_ENCODINGS_BASE at a "
            "folder holding o200k_base.tiktoken (python harness/o200k.py --out DIR writes one)"
        ) from error


# Every special token of the encoding looks like this (and has no `<`, `|` or `>` inside).
SPECIAL_LOOK = re.compile(r"<\|[^<>|]*\|>")


@functools.cache
def _special_tokens() -> tuple[dict[str, int], frozenset[str]]:
    """The special tokens' ids by text, and every proper prefix of their texts."""
    encoding = harmony_encoding()
    ids = {
        token: encoding.encode(token, allowed_special={token}, disallowed_special=())[0]
        for token in encoding.special_tokens_set
    }
    if not all(SPECIAL_LOOK.fullmatch(token) for token in ids):
        raise RuntimeError("unexpected special tokens in the Harmony encoding")
    prefixes = frozenset(token[:end] for token in ids for end in range(1, len(token)))
    return ids, prefixes


def split_off_partial_special(text: str, prefixes: frozenset[str]) -> int:
    """Where a trailing fragment that may still become a special token starts (len(text) if none)."""
    start = text.rfind("<")
    if start >= 0 and text[start:] in prefixes:
        return start
    return len(text)


def function_name(recipient: str | None) -> str | None:
    """The function a message is addressed to, by vLLM's rule for Chat Completions; None if
    the recipient is not a function."""
    if not recipient:
        return None
    constrain = recipient.find("<|constrain|>")  # older Harmony versions put it in the recipient
    if constrain >= 0:
        recipient = recipient[:constrain].rstrip()
    if not recipient or recipient.startswith("<|") or recipient == "assistant":
        return None
    if recipient.startswith(FUNCTIONS_PREFIX):
        return recipient[len(FUNCTIONS_PREFIX) :] or None
    if recipient.split(".", 1)[0] in BUILTIN_TOOLS:
        return None
    return recipient


class HarmonyReader:
    """Reads Harmony text piece by piece and reports what it finds to the callbacks:
    `reasoning(text)`, `content(text)`, and with calls enabled `open_call(name)` (returns
    the call's index) and `arguments(index, text)`."""

    def __init__(
        self,
        *,
        reasoning: Callable[[str], None],
        content: Callable[[str], None],
        open_call: Callable[[str], int] | None = None,
        arguments: Callable[[int, str], None] | None = None,
    ) -> None:
        from openai_harmony import Role, StreamableParser  # noqa: PLC0415

        self._encoding = harmony_encoding()
        self._specials, self._special_prefixes = _special_tokens()
        self._parser: StreamableParser | None = StreamableParser(self._encoding, Role.ASSISTANT)
        self._report = {_REASONING: reasoning, _CONTENT: content}
        self._open_call = open_call
        self._arguments = arguments
        self._pending = ""  # text not encoded yet: a fragment that may become a special token
        self._unread: list[int] = []  # tokens since the last message ended (header so far)
        self._kind: str | None = None  # what the body being read is: _REASONING, _CONTENT, _CALL
        self._call_index = -1
        self._has_text = {_REASONING: False, _CONTENT: False}
        self._message_has_text = False

    @property
    def failed(self) -> bool:
        """The text stopped being valid Harmony; the rest of it is content."""
        return self._parser is None

    def feed(self, text: str) -> None:
        if self._parser is None:
            self._report[_CONTENT](text)
            return
        self._pending += text
        cut = split_off_partial_special(self._pending, self._special_prefixes)
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        if ready:
            self._read(self._encode(ready))

    def finish(self) -> None:
        rest, self._pending = self._pending, ""
        if self._parser is None:
            self._report[_CONTENT](rest)
            return
        if rest:
            self._read(self._encode(rest))
        if self._parser is None:
            return
        try:
            self._parser.process_eos()
        except Exception:  # noqa: BLE001 - HarmonyError: cut off inside a header
            self._give_up([])

    def _encode(self, text: str) -> list[int]:
        """Tokens of `text`, its special-token texts as special tokens. (Splitting them off
        here is much faster than letting the encoder look for all 1,091 of them.)"""
        tokens: list[int] = []
        start = 0
        for match in SPECIAL_LOOK.finditer(text):
            special = self._specials.get(match.group())
            if special is not None:
                if match.start() > start:
                    tokens += self._encode_ordinary(text[start : match.start()])
                tokens.append(special)
                start = match.end()
        if start < len(text):
            tokens += self._encode_ordinary(text[start:])
        return tokens

    def _encode_ordinary(self, text: str) -> list[int]:
        return self._encoding.encode(text, allowed_special=(), disallowed_special=())

    def _read(self, tokens: list[int]) -> None:
        parser = self._parser
        assert parser is not None
        is_special = self._encoding.is_special_token
        for position, token in enumerate(tokens):
            if self._kind is None:
                self._unread.append(token)
            try:
                parser.process(token)
            except Exception:  # noqa: BLE001 - HarmonyError: not Harmony from here on
                self._give_up(tokens[position + 1 :])
                return
            if self._kind is None:
                if is_special(token):
                    self._maybe_start_body(parser.state_data)
            elif is_special(token) and parser.state_data["state"] != "Content":
                self._kind = None  # the message ended (<|end|>, <|call|> or <|return|>)
            else:
                self._body_text(parser.last_content_delta or "")

    def _maybe_start_body(self, state: dict[str, Any]) -> None:
        """After a special token in a header: if it was `<|message|>`, the body starts."""
        if state.get("state") != "Content":
            return
        header = state.get("header") or {}
        role = (header.get("author") or {}).get("role")
        name = function_name(header.get("recipient")) if role == "assistant" else None
        self._unread = []
        self._message_has_text = False
        if name is not None and self._open_call is not None:
            self._kind = _CALL
            self._call_index = self._open_call(name)
        elif name is None and role == "assistant" and header.get("channel") == "analysis":
            self._kind = _REASONING
        else:
            self._kind = _CONTENT

    def _body_text(self, text: str) -> None:
        if not text:
            return
        if self._kind == _CALL:
            assert self._arguments is not None
            self._arguments(self._call_index, text)
            return
        self._part_text(self._kind, text)  # type: ignore[arg-type]

    def _part_text(self, kind: str, text: str) -> None:
        if not self._message_has_text:
            self._message_has_text = True
            if self._has_text[kind]:
                text = "\n" + text
            self._has_text[kind] = True
        self._report[kind](text)

    def _give_up(self, rest: list[int]) -> None:
        """Not Harmony any more: the unfinished message and everything after it is content."""
        self._parser = None
        self._kind = None
        text = self._encoding.decode(self._unread + rest, errors="replace") + self._pending
        self._unread, self._pending = [], ""
        if text:
            self._message_has_text = False
            self._part_text(_CONTENT, text)


@register_tool_parser("openai")
class HarmonyToolParser(ToolParser):
    """gpt-oss (Harmony) output: tool calls, content, and the reasoning too.

    Unlike the other tool parsers it reads the model's raw output, markers included, not
    the content a reasoning parser leaves, and its deltas carry `reasoning`. Use it without
    a separate reasoning parser (`reads_reasoning`)."""

    needs_special_tokens = True
    reads_reasoning = True  # it separates the reasoning itself

    def __init__(self, tools: list[dict] | None = None, make_id: Callable[[], str] | None = None) -> None:
        super().__init__(tools, make_id)
        self._reader = HarmonyReader(
            reasoning=self._emit_reasoning,
            content=self._emit_content,
            open_call=self._open_call,
            arguments=self._emit_arguments,
        )

    def _emit_reasoning(self, text: str) -> None:
        self._delta.reasoning += text

    def _consume(self, text: str, final: bool) -> None:
        if text:
            self._reader.feed(text)
        if final:
            self._reader.finish()


@register_reasoning_parser("openai_gptoss")
class HarmonyReasoningParser(ReasoningParser):
    """gpt-oss (Harmony) output as reasoning and content, without tool calls: the text of a
    message addressed to a function is content. `starts_in_reasoning` is not used (the
    reply always starts with a header)."""

    needs_special_tokens = True

    def __init__(self, starts_in_reasoning: bool = False) -> None:
        super().__init__(starts_in_reasoning)
        self._reader = HarmonyReader(reasoning=self._emit_reasoning, content=self._emit_content)

    def _consume(self, text: str, final: bool) -> None:
        if text:
            self._reader.feed(text)
        if final:
            self._reader.finish()
