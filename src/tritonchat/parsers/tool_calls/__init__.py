"""Tool-call parsers; importing this package registers them."""

from . import hermes, llama3_json, mistral, pythonic  # noqa: F401
