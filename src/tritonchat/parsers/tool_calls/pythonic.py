"""Pythonic tool calls (Llama 3.2 / Llama 4 / ToolACE style): a Python list of calls.

    [get_weather(city="Oslo", days=3), get_time(zone='Europe/Oslo')]

- The reply is tool calls only if it starts (after whitespace, and an optional Llama 4
  `<|python_start|>`) with `[` followed by a call; otherwise it is all content.
- Arguments are keyword arguments whose values are Python literals: strings, numbers,
  True/False/None, lists, dicts with string keys, tuples and sets (as JSON arrays), and the
  JSON spellings true/false/null. They are converted with `ast`, and `arguments`
  is `json.dumps(..., ensure_ascii=False)` of them: keys in the order written, ", " and
  ": " separators.
- A dotted name (`tools.get_weather(...)`) is kept as written.
- Each call is sent whole, in one delta, as soon as its closing `)` arrives: the Python
  text is not JSON, so there is no raw text to stream, and converting an unfinished
  literal could only be guessed.
- Anything that is not such a list (positional or `**` arguments, expressions, repeated
  keywords, a list that never closes) is released as content verbatim, from the start of
  the reply if no call was sent yet, else from the end of the last call sent. Text after
  the list is content, except whitespace alone and a trailing `<|python_end|>`.
"""

from __future__ import annotations

import ast
import io
import json
import math
import tokenize
from collections.abc import Callable, Iterator

from ..base import ToolParser, register_tool_parser
from ..tags import could_become

PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
_JSON_SPELLINGS = {"true": True, "false": False, "null": None}
_SKIPPED_TOKENS = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}


def literal_to_json(node: ast.expr) -> object:
    """The JSON value of a Python literal; ValueError for anything else."""
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or isinstance(value, (str, bool, int)):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = literal_to_json(node.operand)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [literal_to_json(element) for element in node.elts]
    elif isinstance(node, ast.Dict):
        result = {}
        for key, value in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise ValueError("dict keys must be strings")
            result[key.value] = literal_to_json(value)
        return result
    elif isinstance(node, ast.Name) and node.id in _JSON_SPELLINGS:
        return _JSON_SPELLINGS[node.id]
    raise ValueError(f"not a literal: {ast.dump(node)}")


def _dotted_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise ValueError("a call needs a plain or dotted name")


def call_to_json(source: str) -> tuple[str, str]:
    """`name(key=literal, ...)` -> (name, arguments JSON text); ValueError if it is not one."""
    try:
        call = ast.parse(source, mode="eval").body
    except SyntaxError as error:
        raise ValueError(str(error)) from None
    if not isinstance(call, ast.Call) or call.args:
        raise ValueError("only keyword arguments are allowed")
    arguments: dict[str, object] = {}
    for keyword in call.keywords:
        if keyword.arg is None or keyword.arg in arguments:
            raise ValueError("** and repeated keywords are not allowed")
        arguments[keyword.arg] = literal_to_json(keyword.value)
    return _dotted_name(call.func), json.dumps(arguments, ensure_ascii=False)


def _tokens(source: str) -> Iterator[tokenize.TokenInfo]:
    """Python tokens of `source` until it ends or stops making sense (e.g. an unfinished string)."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.ERRORTOKEN, tokenize.ENDMARKER):
                return
            if token.type not in _SKIPPED_TOKENS:
                yield token
    except (tokenize.TokenError, SyntaxError):
        return


class _Offsets:
    """Turns tokenize's (row, column) positions into offsets in the text."""

    def __init__(self, text: str) -> None:
        self.line_starts = [0]
        for line in io.StringIO(text):
            self.line_starts.append(self.line_starts[-1] + len(line))

    def __call__(self, position: tuple[int, int]) -> int:
        row, column = position
        return self.line_starts[row - 1] + column


@register_tool_parser("pythonic")
class PythonicToolParser(ToolParser):
    def __init__(self, tools: list[dict] | None = None, make_id: Callable[[], str] | None = None) -> None:
        super().__init__(tools, make_id)
        self._markup = ""  # whitespace and tag before the list; content if no call follows
        self._list = ""  # the list's text, from its "["
        self._done = 1  # offset in _list just past the last call sent (or the "[")
        self._expect = "element"  # what follows _done: "element" or "separator"
        self._inside_call = False  # the last scan stopped inside a call's parentheses
        self._stage = self._read_start

    def _read_start(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        skipped = len(self._pending) - len(stripped)
        tag_allowed = not self._markup  # at most one <|python_start|>, before the list
        if tag_allowed and stripped.startswith(PYTHON_START):
            self._markup = self._pending[: skipped + len(PYTHON_START)]
            self._pending = stripped[len(PYTHON_START) :]
        elif stripped.startswith("["):
            self._markup += self._pending[:skipped]
            self._pending = stripped
            self._stage = self._read_list
        elif (not stripped or (tag_allowed and could_become(stripped, PYTHON_START))) and not final:
            return False
        else:
            self._give_up()
        return True

    def _read_list(self, final: bool) -> bool:
        new_text, self._pending = self._pending, ""
        self._list += new_text
        if self._inside_call and ")" not in new_text and not final:
            return False  # no call can have closed
        closed_at = self._scan()
        if closed_at is None and final:
            self._expect = "broken"
        if self._expect == "broken":
            self._give_up()
            return True
        if closed_at is None:
            return False
        if not self.calls:  # "[]" or a list that only looked like calls
            self._give_up()
            return True
        self._pending, self._list = self._list[closed_at:], self._list[:closed_at]
        self._stage = self._read_after_list
        return True

    def _scan(self) -> int | None:
        """Send the calls that closed since the last scan. Returns the offset just past the
        list's "]" once it closes; sets _expect to "broken" when the text is not a call list."""
        source = "[" + self._list[self._done :]  # the "[" makes tokenize read it as inside brackets
        offset = _Offsets(source)
        shift = self._done - 1
        state, depth, call_start = self._expect, 0, 0
        self._inside_call = False
        for token in _tokens(source):
            kind, text = token.type, token.string
            start, end = offset(token.start) + shift, offset(token.end) + shift
            if start < self._done:
                continue  # the "[" added above
            if state == "args":
                if kind == tokenize.OP and text in ("(", "[", "{"):
                    depth += 1
                elif kind == tokenize.OP and text in (")", "]", "}"):
                    depth -= 1
                if depth == 0:
                    if not self._send_call(self._list[call_start:end]):
                        self._expect = "broken"
                        return None
                    self._done, self._expect = end, "separator"
                    state = "separator"
                continue
            if kind == tokenize.OP and text == "]" and state in ("element", "separator"):
                return end
            if state == "separator" and kind == tokenize.OP and text == ",":
                state = "element"
            elif state in ("element", "dot") and kind == tokenize.NAME:
                call_start = start if state == "element" else call_start
                state = "name"
            elif state == "name" and kind == tokenize.OP and text in (".", "("):
                state, depth = ("dot", 0) if text == "." else ("args", 1)
            else:
                self._expect = "broken"
                return None
        self._inside_call = state == "args"
        return None

    def _send_call(self, source: str) -> bool:
        try:
            name, arguments = call_to_json(source)
        except ValueError:
            return False
        self._emit_arguments(self._open_call(name), arguments)
        return True

    def _read_after_list(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        if stripped.startswith(PYTHON_END):
            self._pending = stripped[len(PYTHON_END) :]
            return True
        if not stripped or could_become(stripped, PYTHON_END):
            if not final:
                return False
            if not stripped:
                self._pending = ""
                return False
        self._stage = self._read_content
        return True

    def _give_up(self) -> None:
        """Not (or no longer) a call list: the rest is content, verbatim."""
        unsent = self._markup + self._list if not self.calls else self._list[self._done :]
        self._pending = unsent + self._pending
        self._stage = self._read_content
