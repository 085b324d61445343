"""Qwen3-Coder tool calls: XML-like, one parameter per tag.

    Let me check.
    <tool_call>
    <function=get_weather>
    <parameter=city>
    Oslo
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

- `arguments` is `json.dumps(..., ensure_ascii=False)` of the parameters, in the order
  written (`{"city": "Oslo", "days": 3}`); the streamed fragments add up to exactly that.
- A value is the text between `<parameter=NAME>` and `</parameter>` less one leading and
  one trailing newline. It also ends at the next `<parameter=`, at `</function>` or
  `</tool_call>` (a forgotten `</parameter>`) and at the end of generation.
- Values are converted by the type the request's tool schema gives the parameter, as vLLM
  does (`convert_value`): a parameter the schema does not describe, or whose only type is
  string, stays a string, and streams as it is written; any other value is sent whole
  when it ends, e.g. "3" as 3 for an integer. A parameter written twice appears twice in
  the JSON text (the last value wins when it is read).
- As in vLLM, `<function=` without `<tool_call>` also opens a call (the model sometimes
  leaves the tag out). A call is announced once `<function=NAME>` is followed by
  `<parameter=` or `</function>`; text between parameters is ignored.
- Text before and after calls is content, except whitespace alone between or after calls.
  What follows `<tool_call>` and is not such a call is released as content, tags
  included. An announced call stays a call, closed at the end of generation if it was cut
  off there (its last value as far as it got).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from ..base import register_tool_parser
from ..tags import could_become, split_at_tag
from .sectioned import NAME
from .tagged import TaggedCallsParser

TOOL_CALL = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
FUNCTION = "<function="
FUNCTION_END = "</function>"
PARAMETER = "<parameter="
PARAMETER_END = "</parameter>"

_TYPE_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string", "enum": "string",
    "int": "integer", "int32": "integer", "int64": "integer", "uint": "integer", "uint32": "integer",
    "uint64": "integer", "long": "integer", "short": "integer", "unsigned": "integer",
    "float": "number", "float32": "number", "float64": "number", "double": "number",
    "bool": "boolean", "dict": "object", "arr": "array", "list": "array", "sequence": "array",
}  # fmt: skip
_ENUM_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))


def schema_types(schema: object) -> set[str]:
    """The JSON types a schema allows, from `type`, `enum` values and `anyOf`/`oneOf`/`allOf`;
    {"string"} when it says nothing. Type names are lower-cased and aliases resolved."""
    if not isinstance(schema, dict):
        return {"string"}
    types: set[str] = set()
    declared = schema.get("type")
    for name in [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []:
        if isinstance(name, str):
            types.add(name)
    enum = schema.get("enum")
    for value in enum if isinstance(enum, list) else []:
        if value is None:
            types.add("null")
        else:
            types.update(next(([kind] for cls, kind in _ENUM_TYPES if isinstance(value, cls)), []))
    for key in ("anyOf", "oneOf", "allOf"):
        choices = schema.get(key)
        for choice in choices if isinstance(choices, list) else []:
            types |= schema_types(choice)
    types = {_TYPE_ALIASES.get(name.strip().lower(), name.strip().lower()) for name in types}
    return types or {"string"}


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(item) for item in value)
    if isinstance(value, dict):
        return all(_finite(item) for item in value.values())
    return True


def _json_value(text: str) -> tuple[bool, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return False, None
    return _finite(value), value


def convert_value(text: str, types: set[str]) -> object:
    """A parameter's text as the first of null, integer, number, boolean, object, array and
    string (in that order) that `types` allows and the text reads as; with none of them,
    the text as JSON if it is JSON, else the text."""
    for kind in ("null", "integer", "number", "boolean", "object", "array", "string"):
        if kind not in types:
            continue
        if kind == "null" and text.lower() == "null":
            return None
        if kind == "integer":
            try:
                return int(text)
            except ValueError:
                pass
        elif kind == "number":
            try:
                number = float(text)
            except ValueError:
                continue
            if math.isfinite(number):
                return int(number) if number == int(number) else number
        elif kind == "boolean" and text.strip().lower() in ("true", "1", "false", "0"):
            return text.strip().lower() in ("true", "1")
        elif kind in ("object", "array"):
            ok, value = _json_value(text)
            if ok:
                return value
        elif kind == "string":
            return text
    ok, value = _json_value(text)
    return value if ok else text


def _json_string_body(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


@register_tool_parser("qwen3_coder")
class Qwen3CoderToolParser(TaggedCallsParser):
    open_tags = (TOOL_CALL, FUNCTION)

    def __init__(self, tools: list[dict] | None = None, make_id: Callable[[], str] | None = None) -> None:
        super().__init__(tools, make_id)
        self._properties: dict = {}

    def _parameter_types(self, function: str, parameter: str) -> set[str] | None:
        """The types to convert a parameter's value to; None to keep it a string."""
        schema = self._properties.get(parameter)
        return schema_types(schema) if isinstance(schema, dict) else None

    def _tool_properties(self, name: str) -> dict:
        for tool in self.tools:
            function = tool.get("function", tool) if isinstance(tool, dict) else None
            if isinstance(function, dict) and function.get("name") == name:
                parameters = function.get("parameters") or {}
                properties = parameters.get("properties") if isinstance(parameters, dict) else None
                return properties if isinstance(properties, dict) else {}
        return {}

    # Before the call is announced.

    def _start_calls(self) -> None:
        self._markup = self._tag  # content if no call follows
        self._stage = self._read_function_tag if self._tag == TOOL_CALL else self._read_function_name
        self._index: int | None = None

    def _read_calls(self, final: bool) -> bool:
        return self._stage(final)

    def _read_function_tag(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        if stripped.startswith(FUNCTION):
            self._markup += self._pending[: len(self._pending) - len(stripped)] + FUNCTION
            self._pending = stripped[len(FUNCTION) :]
            self._stage = self._read_function_name
        elif not final and could_become(stripped, FUNCTION):
            return False
        else:
            self._give_up(self._markup)
        return True

    def _read_function_name(self, final: bool) -> bool:
        name, tag, rest = split_at_tag(self._pending, ">")
        if tag is None and not final and NAME.fullmatch(name.strip() or "x"):
            return False
        if tag is None or not NAME.fullmatch(name.strip()):
            self._give_up(self._markup)
            return True
        self._markup, self._pending = self._markup + name + tag, rest
        self._name = name.strip()
        self._stage = self._read_function_body_start
        return True

    def _read_function_body_start(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        if stripped.startswith((PARAMETER, FUNCTION_END)):
            self._index = self._open_call(self._name)
            self._properties = self._tool_properties(self._name)
            self._emit_arguments(self._index, "{")
            self._first_parameter = True
            self._pending = stripped
            self._stage = self._read_parameters
        elif not final and (could_become(stripped, PARAMETER) or could_become(stripped, FUNCTION_END)):
            return False
        else:
            self._give_up(self._markup)
        return True

    # Inside an announced call.

    def _read_parameters(self, final: bool) -> bool:
        """Between parameters: anything but the tags is ignored."""
        _, tag, rest = split_at_tag(self._pending, PARAMETER, FUNCTION_END, TOOL_CALL_END)
        self._pending = rest
        if tag is None:
            if final:
                self._close_call()
                self._end_calls()
                return True
            return False
        if tag == PARAMETER:
            self._stage = self._read_parameter_name
        else:
            self._close_call()
            self._after_function(tag)
        return True

    def _read_parameter_name(self, final: bool) -> bool:
        name, tag, rest = split_at_tag(self._pending, ">")
        if tag is None and not final and "\n" not in name and "<" not in name:
            return False
        if tag is None or "\n" in name or "<" in name:
            self._stage = self._read_parameters  # not a parameter: ignored like other text
            return True
        self._pending = rest
        name = name.strip()
        self._types = self._parameter_types(self._name, name)
        self._streams = self._types is None or self._types == {"string"}
        separator = "" if self._first_parameter else ", "
        self._first_parameter = False
        self._emit_arguments(self._index, f"{separator}{json.dumps(name, ensure_ascii=False)}: " + '"' * self._streams)
        self._value, self._value_started = "", False
        self._stage = self._read_value
        return True

    def _read_value(self, final: bool) -> bool:
        text, tag, rest = split_at_tag(self._pending, PARAMETER_END, PARAMETER, FUNCTION_END, TOOL_CALL_END)
        if tag is None and not final:
            self._pending = rest  # the start of a tag, perhaps
            held_newline = text.endswith("\n")
            if held_newline:  # perhaps the newline before </parameter>, which is not part of the value
                text, self._pending = text[:-1], "\n" + self._pending
            self._add_to_value(text)
            return False
        if tag is None:
            text, rest = self._pending, ""
        self._pending = rest
        self._add_to_value(text.removesuffix("\n") if (self._value_started or text != "\n") else text)
        self._end_value()
        if tag == PARAMETER:
            self._stage = self._read_parameter_name
        elif tag == PARAMETER_END:
            self._stage = self._read_parameters
        else:
            self._close_call()
            if tag is None:
                self._end_calls()
            else:
                self._after_function(tag)
        return True

    def _add_to_value(self, text: str) -> None:
        if not text:
            return
        if not self._value_started:
            self._value_started = True
            text = text.removeprefix("\n")
        if self._streams:
            self._emit_arguments(self._index, _json_string_body(text))
        else:
            self._value += text

    def _end_value(self) -> None:
        if self._streams:
            self._emit_arguments(self._index, '"')
        else:
            value = convert_value(self._value, self._types)
            self._emit_arguments(self._index, json.dumps(value, ensure_ascii=False))

    def _close_call(self) -> None:
        self._emit_arguments(self._index, "}")

    def _after_function(self, tag: str) -> None:
        if tag == TOOL_CALL_END:
            self._end_calls()
        else:
            self._stage = self._read_tool_call_end

    def _read_tool_call_end(self, final: bool) -> bool:
        stripped = self._pending.lstrip()
        if stripped.startswith(TOOL_CALL_END):
            self._pending = stripped[len(TOOL_CALL_END) :]
        elif not final and could_become(stripped, TOOL_CALL_END):
            return False
        self._end_calls()
        return True
