"""The gateway's Anthropic Messages routes, in front of the `anthropic_messages` model:

    POST /v1/messages                 the body forwarded unchanged; `"stream": true` answers with
                                      Anthropic's server-sent events (`event: <type>` before each
                                      `data: {...}`, no `[DONE]`)
    POST /v1/messages/count_tokens    the body with `"endpoint": "count_tokens"` added

Errors are Anthropic's `{"type": "error", "error": {"type", "message"}}` with Anthropic's status
(from the error's type, `tritonchat.protocol.anthropic.ERROR_STATUSES`); one after the first
event ends the stream as an `error` event. Used by `tritonchat.clients.gateway`.
"""

# No `from __future__ import annotations`: FastAPI is imported inside the functions (the
# `gateway` extra), as in gateway.py.

import json

from ..protocol.anthropic import ERROR_STATUSES, KINDS, error_body

MESSAGES_MODEL = "anthropic_messages"


def counting_body(body: bytes) -> str:
    """A count_tokens body as the model takes it: marked with `"endpoint": "count_tokens"`
    (a body that is not a JSON object goes as it is: the model answers the 400)."""
    text = body.decode("utf-8", errors="replace")
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if not isinstance(value, dict):
        return text
    return json.dumps({**value, "endpoint": "count_tokens"}, ensure_ascii=False)


def event_name(payload: str) -> str:
    """The `type` of an event payload (first in every payload the model sends)."""
    if payload.startswith('{"type":"'):
        end = payload.find('"', 9)
        if end > 9:
            return payload[9:end]
    try:
        value = json.loads(payload)
    except ValueError:
        return "error"
    return str(value.get("type", "error")) if isinstance(value, dict) else "error"


def sse(payload: str) -> str:
    return f"event: {event_name(payload)}\ndata: {payload}\n\n"


def failure(exc: Exception) -> tuple[int, dict]:
    """The status and Anthropic error object of a failed request to Triton: the model's own error
    object (the wire raises it as an `openai` exception holding its inner `error`), else one made
    from the status of an error Triton itself answered, else Triton cannot be reached (529)."""
    import openai  # noqa: PLC0415  (the `gateway` extra)

    if isinstance(exc, openai.APIStatusError):
        inner = exc.body if isinstance(exc.body, dict) else {}
        kind = inner.get("type")
        message = str(inner.get("message") or exc.message)
        if kind in ERROR_STATUSES:
            return ERROR_STATUSES[kind], error_body(kind, message)
        kind = KINDS.get(exc.status_code, "api_error")
        return ERROR_STATUSES[kind], error_body(kind, message)
    return ERROR_STATUSES["overloaded_error"], error_body(
        "overloaded_error", f"Triton cannot be reached: {exc or type(exc).__name__}")


async def forward(wire, model: str, text: str, stream: bool):
    """One Messages request through `wire` to `model`: the answer as a FastAPI response."""
    import openai  # noqa: PLC0415
    from fastapi.responses import JSONResponse, Response, StreamingResponse  # noqa: PLC0415

    from .wires import httpx  # noqa: PLC0415

    failures = (openai.APIStatusError, httpx.TransportError)
    payloads = wire.payloads(model, text, stream)
    try:
        first = await payloads.__anext__()
    except failures as exc:  # refused before any event: a plain error response
        await payloads.aclose()
        status, content = failure(exc)
        return JSONResponse(content, status_code=status)
    except StopAsyncIteration:
        first = None
    if not stream:
        await payloads.aclose()
        return Response(first or "", media_type="application/json")

    async def events():
        try:
            if first is not None:
                yield sse(first)
                async for payload in payloads:
                    yield sse(payload)
        except failures as exc:
            yield sse(json.dumps(failure(exc)[1], ensure_ascii=False, separators=(",", ":")))
        finally:
            await payloads.aclose()  # on a disconnect too: closing the Triton request cancels it

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


__all__ = ["MESSAGES_MODEL", "counting_body", "event_name", "failure", "forward", "sse"]
