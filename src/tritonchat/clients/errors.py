"""An OpenAI error object from the server, as the `openai` package's exception.

`openai_chat` reports a failure as a Triton error whose message is an OpenAI error object,
`{"error": {"message", "type", "param", "code"}}`. Its HTTP status is read from the object itself
(`tritonchat.errors.status_of`, the server's own table), so it is right over gRPC and on Triton
releases whose generate endpoints answer 400 for every error.

    api_error(message, url)   the `openai.APIStatusError` subclass for a Triton error message
    error_body(message)       the OpenAI error object in it (a plain message is wrapped)
    httpx                     the HTTP library of the `openai` package (httpx2 from openai 3.x)
"""

from __future__ import annotations

import json

try:
    import httpx2 as httpx  # the HTTP library of the `openai` package from 3.x
except ImportError:  # pragma: no cover  (older openai releases use httpx)
    import httpx

import openai

from ..errors import status_of

EXCEPTIONS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def error_body(message: str) -> dict:
    """The OpenAI error object inside a Triton error message (a plain message is wrapped)."""
    try:
        value = json.loads(message)
    except (TypeError, ValueError):
        value = None
    if isinstance(value, dict) and isinstance(value.get("error"), dict):
        return value
    return {"error": {"message": str(message), "type": "server_error", "param": None, "code": None}}


def api_error(message: str, url: str) -> openai.APIStatusError:
    """The `openai` exception for a Triton error message holding an OpenAI error object."""
    body = error_body(message)
    status = status_of(body["error"])
    response = httpx.Response(status, json=body, request=httpx.Request("POST", url))
    exception = EXCEPTIONS.get(status, openai.InternalServerError if status >= 500 else openai.APIStatusError)
    return exception(body["error"].get("message") or message, response=response, body=body["error"])


__all__ = ["EXCEPTIONS", "api_error", "error_body", "httpx"]
