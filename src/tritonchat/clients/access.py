"""Who may call the gateway, and how much they may send: two ASGI middlewares.

    Keys(app, keys)           API keys per route group: 401 without the group's key
    BodyCap(app, limit)       413 for a request body over `limit` bytes, before the app sees it
    group_of(path)            the route group of a path: "inference", "models", "health" or None
    resolve_keys(key, own)    the key each group needs, from the single key and the groups' own

The groups: `inference` (`/v1/chat/completions`, `/v1/completions`, `/v1/messages`,
`/v1/responses`, any other `/v1/` path, and vLLM's `/tokenize` and `/detokenize`), `models` (`/v1/models`, `/v1/models/{id}`) and
`health` (`/health`, `/health/ready`, `/health/live`). The single key guards every `/v1/` group without a key of its own; `health`
needs a key only when it is given its own, so that probes and load balancers keep working.

A key is sent as `Authorization: Bearer KEY` or as `x-api-key: KEY` (the `anthropic` SDK's header).
Keys are compared in constant time (SHA-256 digests compared with `hmac.compare_digest`) and are
never written to a log or an error message. Errors are OpenAI's error objects, and Anthropic's
(`{"type": "error", "error": {"type", "message"}}`) on Anthropic's routes (`/v1/messages...`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

log = logging.getLogger("tritonchat.gateway")

GROUPS = ("inference", "models", "health")
# The groups the single key guards when they have no key of their own (every `/v1/` route).
SHARED_GROUPS = ("inference", "models")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def error_object(message: str, kind: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def is_anthropic(path: str) -> bool:
    """Whether a path is one of Anthropic's routes, whose errors are Anthropic's."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def refusal(path: str, message: str, kind: str, code: str | None, anthropic_kind: str) -> dict:
    """An error object for a request the gateway refuses itself, in the shape its route speaks."""
    if is_anthropic(path):
        return {"type": "error", "error": {"type": anthropic_kind, "message": message}}
    return error_object(message, kind, code)


async def send_json(send: Send, status: int, body: dict, headers: list[tuple[bytes, bytes]] = ()) -> None:
    content = json.dumps(body, separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(content)).encode()), *headers]})
    await send({"type": "http.response.body", "body": content})


def group_of(path: str) -> str | None:
    """The route group of a request path (None: no group, open)."""
    if path == "/v1/models" or path.startswith("/v1/models/"):
        return "models"
    if path.startswith("/v1/") or path in ("/tokenize", "/detokenize"):
        return "inference"
    if path == "/health" or path.startswith("/health/"):
        return "health"
    return None


def resolve_keys(api_key: str | None, own: dict[str, str] | None = None) -> dict[str, str]:
    """The key each group needs: its own, else (for the `/v1/` groups) the single `api_key`.
    Groups without a key are left out (open); empty keys count as none."""
    own = own or {}
    unknown = sorted(set(own) - set(GROUPS))
    if unknown:
        raise ValueError(f"unknown API group {unknown[0]!r} (groups: {', '.join(GROUPS)})")
    keys = {}
    for group in GROUPS:
        key = own.get(group) or (api_key if group in SHARED_GROUPS else None)
        if key:
            keys[group] = key
    return keys


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", errors="surrogateescape")).digest()


def presented_keys(headers: list[tuple[bytes, bytes]]) -> list[str]:
    """The keys a request presents: its `Authorization: Bearer` token and its `x-api-key` header."""
    keys = [token] if (token := bearer_token(headers)) is not None else []
    for name, value in headers:
        if name.lower() == b"x-api-key" and value.strip():
            keys.append(value.decode("latin-1").strip())
    return keys


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, else None."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


class Keys:
    """API keys per route group (`keys`: group -> key; a group not in it is open)."""

    def __init__(self, app, keys: dict[str, str]):
        self.app = app
        self.digests = {group: _digest(key) for group, key in keys.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        group = group_of(scope.get("path", "")) if scope["type"] == "http" else None
        if group not in self.digests:
            await self.app(scope, receive, send)
            return
        keys = presented_keys(scope.get("headers", []))
        # Every key is compared (no early exit), so the time taken says nothing about which matched.
        matches = [hmac.compare_digest(_digest(key), self.digests[group]) for key in keys]
        if any(matches):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        reason = "a wrong API key" if keys else "no API key"
        log.warning("401 for %s %s (the %s group): %s", scope.get("method"), path, group, reason)
        message = ("Incorrect API key provided." if keys else
                   "No API key provided: send it as `Authorization: Bearer KEY` or `x-api-key: KEY`.")
        await send_json(send, 401, refusal(path, message, "authentication_error", "invalid_api_key",
                                           "authentication_error"), [(b"www-authenticate", b"Bearer")])


class _TooLarge(Exception):
    pass


class BodyCap:
    """413 for a body over `limit` bytes: at once when its Content-Length says so, else as soon as
    the bytes read pass the limit. The body is read whole before the app is called, so nothing of
    a refused request reaches Triton; the app then reads it from memory."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers", [])).get(b"content-length")
        try:
            if length is not None and int(length) > self.limit:
                raise _TooLarge
            body = await self._read(receive)
        except _TooLarge:
            await self._refuse(scope, send)
            return
        except ValueError:  # a Content-Length that is not a number
            await send_json(send, 400, refusal(scope.get("path", ""), "The Content-Length header is not a number.",
                                               "invalid_request_error", None, "invalid_request_error"))
            return
        if body is None:  # the client left before sending its body
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then the client's disconnect, for a streaming answer

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes | None:
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            part = message.get("body", b"")
            size += len(part)
            if size > self.limit:
                raise _TooLarge
            parts.append(part)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        log.warning("413 for %s %s: the body is over %d bytes", scope.get("method"), scope.get("path"), self.limit)
        message = f"The request body is larger than {self.limit} bytes (the gateway's --max-body-bytes)."
        await send_json(send, 413, refusal(scope.get("path", ""), message, "invalid_request_error", "request_too_large",
                                           "request_too_large"), [(b"connection", b"close")])


__all__ = ["GROUPS", "SHARED_GROUPS", "BodyCap", "Keys", "bearer_token", "group_of", "is_anthropic", "presented_keys",
           "refusal", "resolve_keys"]
