"""Reasoning parsers; importing this package registers them."""

from . import deepseek_r1, qwen3  # noqa: F401
