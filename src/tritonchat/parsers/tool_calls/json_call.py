"""Reading one JSON tool call while its text is still growing.

The arguments a parser sends are the model's own text of the arguments object, a slice of
the output, never a re-serialisation. That way each streamed fragment is final the moment
it is sent: nothing is autocompleted, and the fragments add up to exactly the arguments
that `parse` reports.

`JsonCall` finds that slice. It walks the members of the top-level object with the
standard library's JSON decoder (`json.decoder.scanstring` for keys, `raw_decode` for
values), so a value is only ever read once it is complete. The arguments object is the
one value it does not wait for: from its `{` on, every character up to the end of the
text belongs to it until `raw_decode` finds where it closes. `partial_json_parser`
answers the one question about incomplete text it needs: can this still become JSON?
"""

from __future__ import annotations

import json
from json.decoder import scanstring
from typing import TYPE_CHECKING

import partial_json_parser
from partial_json_parser.core.exceptions import MalformedJSON

if TYPE_CHECKING:
    from ..base import ToolParser

ARGUMENT_KEYS = ("arguments", "parameters")  # Llama 3 says "parameters"
_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def _skip_whitespace(text: str, position: int) -> int:
    while position < len(text) and text[position] in _WHITESPACE:
        position += 1
    return position


def _may_continue_number(rest: str) -> bool:
    return all(character in "0123456789.eE+-" for character in rest)


def cannot_become_json(text: str) -> bool:
    """True when no continuation of `text` is valid JSON (per partial_json_parser)."""
    if not text.strip():
        return False
    try:
        partial_json_parser.loads(text)
    except MalformedJSON:
        return True
    except Exception:  # noqa: BLE001 - it completed the text into something invalid, or choked
        return False  # on it (AssertionError seen in 0.2.1): decide once the text is complete
    return False


class JsonCall:
    """Follows the text of one call as it grows.

    Envelope form (`name=None`): `{"name": "f", "arguments": {...}}`, keys in any order,
    other keys ignored, "parameters" accepted for "arguments".
    Bare form (`name` given, as in Mistral's `[TOOL_CALLS]f{...}`): the text is the
    arguments object itself.

    Attributes, all offsets into `text`:
      name             the complete name, once read
      arguments_start  where the arguments object's `{` is, once reached
      arguments_end    just past its `}`, once it is complete
      end              just past the whole object, once it is complete
      broken           the text cannot be this kind of call any more
    """

    def __init__(self, name: str | None = None) -> None:
        self.text = ""
        self.bare = name is not None
        self.name = name
        self.arguments_start: int | None = None
        self.arguments_end: int | None = None
        self.end: int | None = None
        self.broken = False
        self._other_arguments: object = None  # a non-object arguments value, read whole
        self._has_other_arguments = False
        self._position = 0  # where reading resumes
        self._expect = "open"  # open | first_member | next_member | arguments
        self._checked_length = 0  # text length at the last attempt to close the arguments
        self._sent = 0  # offset up to which argument text was handed out

    @property
    def ready(self) -> bool:
        """Name known and arguments object begun like JSON (`{"` or `{}`): the call can be announced."""
        if not self.name or self.arguments_start is None:
            return False
        first = _skip_whitespace(self.text, self.arguments_start + 1)
        return first < len(self.text) and self.text[first] in '"}'

    def append(self, more: str) -> None:
        self.text += more
        self._read()
        if not self.ready and self.end is None and not self.broken and cannot_become_json(self.text):
            self.broken = True

    def take_arguments(self) -> str:
        """Argument text that was not handed out yet and is known to belong to the arguments."""
        if self.arguments_start is None:
            return ""
        stop = self.arguments_end if self.arguments_end is not None else len(self.text)
        start = max(self._sent, self.arguments_start)
        self._sent = max(self._sent, stop)
        return self.text[start:stop]

    @property
    def finished(self) -> bool:
        """The object is complete, or it broke after the arguments of a ready call closed:
        either way, what follows is not part of this call."""
        return self.end is not None or (self.broken and self.ready)

    def leftover(self) -> str:
        """The text after the call, once it is `finished`."""
        if self.end is not None:
            return self.text[self.end :]
        if self.finished:
            return self.text[self.arguments_end :]
        return ""

    def whole_call_arguments(self) -> str | None:
        """For a complete object that was never `ready`: its arguments text, or None if it is
        not a call. Missing arguments are `{}`; arguments given as a string holding a JSON
        object (a quirk of some fine-tunes) are that string."""
        if self.end is None or not self.name:
            return None
        if self.arguments_start is not None:
            return self.text[self.arguments_start : self.arguments_end]
        if not self._has_other_arguments:
            return "{}"
        if isinstance(self._other_arguments, str):
            try:
                decoded = json.loads(self._other_arguments)
            except json.JSONDecodeError:
                return None
            if isinstance(decoded, dict):
                return self._other_arguments
        return None

    def _read(self) -> None:
        text = self.text
        while not self.broken and self.end is None:
            at = _skip_whitespace(text, self._position)
            if at == len(text):
                return
            if self._expect == "open":
                self._read_opening(at)
            elif self._expect == "arguments":
                if not self._close_arguments():
                    return
            elif text[at] == "}":
                self.end = at + 1
            elif not self._read_member(at):
                return

    def _read_opening(self, at: int) -> None:
        if self.text[at] != "{":
            self.broken = True
        elif self.bare:
            self.arguments_start, self._position, self._expect = at, at, "arguments"
        else:
            self._position, self._expect = at + 1, "first_member"

    def _close_arguments(self) -> bool:
        """Try to find where the arguments object closes; it can only be at a new `}`."""
        text = self.text
        if "}" not in text[self._checked_length :]:
            self._checked_length = len(text)
            return False
        self._checked_length = len(text)
        try:
            _, end = _DECODER.raw_decode(text, self.arguments_start)
        except json.JSONDecodeError:
            return False
        self.arguments_end = end
        if self.bare:
            self.end = end
        self._position, self._expect = end, "next_member"
        return True

    def _read_member(self, at: int) -> bool:
        """Read `[,] "key": value` if it is all there; False to wait for more text."""
        text = self.text
        if self._expect == "next_member":
            if text[at] != ",":
                self.broken = True
                return False
            at = _skip_whitespace(text, at + 1)
        if at == len(text):
            return False
        if text[at] != '"':
            self.broken = True
            return False
        try:
            key, at = scanstring(text, at + 1)
        except json.JSONDecodeError:
            return False  # unfinished key (or a bad escape, settled when the text is complete)
        at = _skip_whitespace(text, at)
        if at == len(text):
            return False
        if text[at] != ":":
            self.broken = True
            return False
        at = _skip_whitespace(text, at + 1)
        if at == len(text):
            return False
        if key in ARGUMENT_KEYS and text[at] == "{" and self.arguments_start is None:
            self.arguments_start, self._position, self._expect = at, at, "arguments"
            return True
        try:
            value, end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            return False
        if isinstance(value, (int, float)) and not isinstance(value, bool) and _may_continue_number(text[end:]):
            return False  # "1" may become "12", "-0" may become "-0.75"
        if key == "name" and self.name is None and isinstance(value, str):
            self.name = value
        elif key in ARGUMENT_KEYS and not self._has_other_arguments and self.arguments_start is None:
            self._other_arguments, self._has_other_arguments = value, True
        self._position, self._expect = end, "next_member"
        return True


def stream_call(parser: ToolParser, call: JsonCall, index: int | None) -> int | None:
    """Announce `call` once it is ready and send its new argument text. Returns its index."""
    if index is None and call.ready:
        index = parser._open_call(call.name)  # type: ignore[arg-type]
    if index is not None:
        parser._emit_arguments(index, call.take_arguments())
    return index


def read_bare_call(parser: ToolParser, call: JsonCall, index: int | None, text: str,
                   final: bool) -> tuple[int | None, bool]:
    """Feed `text` to a call that no closing tag ends (its JSON does) and stream what is
    certain. Returns its index, and whether it is over: its JSON is complete, the output
    ended, or it broke before it was announced (so it is no call)."""
    call.append(text)
    index = stream_call(parser, call, index)
    return index, call.finished or final or (call.broken and index is None)


def settle_call(parser: ToolParser, call: JsonCall, index: int | None) -> bool:
    """The call's text is complete: send what is left. False when it is not a call after all."""
    if index is not None:
        parser._emit_arguments(index, call.take_arguments())
        return True
    arguments = call.whole_call_arguments()
    if arguments is None:
        return False
    parser._emit_arguments(parser._open_call(call.name), arguments)  # type: ignore[arg-type]
    return True
