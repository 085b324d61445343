"""Finding marker tags in text that arrives in pieces."""

from __future__ import annotations


def partial_tag_length(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is the start of `tag` (the whole tag excluded)."""
    for length in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:length]):
            return length
    return 0


def split_at_tag(text: str, *tags: str) -> tuple[str, str | None, str]:
    """Split `text` at the earliest of `tags`.

    Returns `(before, tag, after)` when one is there. Otherwise `(safe, None, held)`:
    `held` is an end of the text that may still turn out to be a tag once more text
    arrives, and `safe` is everything before it.
    """
    found: tuple[int, str] | None = None
    for tag in tags:
        position = text.find(tag)
        if position >= 0 and (found is None or position < found[0]):
            found = (position, tag)
    if found is not None:
        position, tag = found
        return text[:position], tag, text[position + len(tag) :]
    held = max(partial_tag_length(text, tag) for tag in tags)
    return text[: len(text) - held], None, text[len(text) - held :]


def could_become(text: str, tag: str) -> bool:
    """True while `text` is still a (possibly empty) start of `tag`."""
    return len(text) < len(tag) and tag.startswith(text)
