"""The client side of tritonchat: a Python client, the `tritonchat` command and an
OpenAI-compatible gateway, all in front of the `openai_chat` / `openai_completions` models.

    from tritonchat.clients import TritonChat, AsyncTritonChat

    errors    an OpenAI error object from the server -> the `openai` package's exception
    wires     HTTP and gRPC, sync and async: one request body in, its response payloads out
    chat      TritonChat, AsyncTritonChat, Stream, AsyncStream (shaped like the `openai` SDK)
    cli       the `tritonchat` command                       (the `client` extra)
    gateway   python -m tritonchat.clients.gateway          (the `gateway` extra)
    access    the gateway's API keys per route group and its request-body cap
    extras    one line naming the extra to install when a package is missing

The clients import only layer 0 of the package (`tritonchat.errors`, `tritonchat.sse`,
`tritonchat.protocol`) and each other; the server side never imports them. The names below are
loaded on first use, so that the command and the gateway can start (and say which extra is
missing) without the `openai` package.
"""

from __future__ import annotations

import importlib

CHAT_MODEL = "openai_chat"
COMPLETIONS_MODEL = "openai_completions"

_LAZY = {
    "TritonChat": "chat", "AsyncTritonChat": "chat", "Stream": "chat", "AsyncStream": "chat",
    "api_error": "errors",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CHAT_MODEL", "COMPLETIONS_MODEL", "AsyncStream", "AsyncTritonChat", "Stream", "TritonChat", "api_error"]
