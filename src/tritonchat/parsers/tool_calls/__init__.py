"""Tool-call parsers; importing this package registers them."""

from . import (  # noqa: F401
    deepseek,
    granite,
    hermes,
    kimi_k2,
    llama3_json,
    llama4_pythonic,
    mistral,
    pythonic,
    qwen3_coder,
)
