"""A pydantic validation failure as one 400 that names the request field which failed, in the
client's terms (`messages[0].content`, not pydantic's location with union member names)."""

from __future__ import annotations

from pydantic import ValidationError

from ..errors import BadRequestError
from .parts import PART_TYPES, ROLES


_UNION_MEMBER_NAMES = {"str", "int", "float", "bool", "none", "dict", "list"}


def _param_path(loc: tuple) -> str:
    """('messages', 0, 'user', 'content') -> 'messages[0].content'.

    pydantic puts union member names (a discriminator tag like 'user', or a type like
    'list[TextPart]', or a content part's type tag) into the location; they are not part of the client's field path.
    """
    path = ""
    previous = None
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif (
            "[" in part
            or part in _UNION_MEMBER_NAMES
            or part.startswith(("function-", "literal["))
            or (isinstance(previous, int) and (part in ROLES or part in PART_TYPES))
            or part[:1].isupper()
        ):
            pass
        else:
            path += f".{part}" if path else part
        previous = part
    return path


def _short(value, limit: int = 80) -> str:
    """A client's value as an error message may repeat it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_error(exc: ValidationError) -> BadRequestError:
    """One 400 for a pydantic failure, naming the most specific field that failed."""
    errors = [(err, _param_path(err["loc"])) for err in exc.errors(include_url=False)]
    first = errors[0][1]
    # A union reports one error per member; the deepest path under the first one is the
    # member the client most likely meant (e.g. content[0].type rather than content).
    chosen = max((p for _, p in errors if p.startswith(first)), key=len)
    reasons = []
    for err, path in errors:
        if path != chosen:
            continue
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "this field is required"
        elif err["type"] == "literal_error":
            msg = f"{msg}, got {_short(err['input'])}"
        if msg not in reasons:
            reasons.append(msg)
    where = chosen or "request"
    return BadRequestError(f"Invalid value for '{where}': {'; or '.join(reasons)}.", param=chosen or None)
