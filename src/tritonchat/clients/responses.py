"""The gateway's OpenAI Responses route, in front of the `openai_responses` model:

    POST /v1/responses    the body forwarded unchanged; `"stream": true` answers with OpenAI's
                          server-sent events for Responses (`event: <type>` before each
                          `data: {...}`, no `[DONE]`)

Errors are OpenAI's error objects with their HTTP status; an error before the first event is a
plain error response (the SDK raises it), one after it ends the stream as an `error` event,
`{"type": "error", "sequence_number", "code", "message", "param"}`, the event the `openai` SDK's
types have for it (its sequence number follows the last event sent). Used by
`tritonchat.clients.gateway`.
"""

# No `from __future__ import annotations`: FastAPI is imported inside the functions (the
# `gateway` extra), as in gateway.py.

import json

from .access import error_object

RESPONSES_MODEL = "openai_responses"
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def event_name(payload: str) -> str:
    """The `type` of an event payload (the first key of every payload the model sends)."""
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
    """The status and OpenAI error object of a failed request to Triton."""
    import openai  # noqa: PLC0415  (the `gateway` extra)

    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {"message": exc.message, "type": "server_error",
                                                            "param": None, "code": None}
        return exc.status_code, {"error": body}
    return 503, error_object(f"Triton cannot be reached: {exc or type(exc).__name__}", "server_error",
                             "service_unavailable")


def error_event(error: dict, sequence_number: int) -> str:
    """An error after the first event, as the stream's last event."""
    inner = error.get("error") if isinstance(error.get("error"), dict) else {}
    return _dumps({"type": "error", "sequence_number": sequence_number, "code": inner.get("code") or inner.get("type"),
                   "message": str(inner.get("message") or "The response failed."), "param": inner.get("param")})


async def forward(wire, model: str, text: str, stream: bool):
    """One Responses request through `wire` to `model`: the answer as a FastAPI response."""
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
        sent = 0  # the model numbers its events 0, 1, ...: the next one's number
        try:
            if first is not None:
                yield sse(first)
                sent += 1
                async for payload in payloads:
                    yield sse(payload)
                    sent += 1
        except failures as exc:
            yield sse(error_event(failure(exc)[1], sent))
        finally:
            await payloads.aclose()  # on a disconnect too: closing the Triton request cancels it

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


__all__ = ["RESPONSES_MODEL", "error_event", "event_name", "failure", "forward", "sse"]
