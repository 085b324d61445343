"""OpenAI-shaped errors.

Every failure a client can see is an `OpenAIError`: an HTTP-like status plus the body
OpenAI sends, `{"error": {"message", "type", "param", "code"}}`. The Triton layer turns
the status into a Triton error code (see `tritonchat.triton`), which Triton's HTTP
endpoints map back to the same status.
"""

from __future__ import annotations

import json


class OpenAIError(Exception):
    """An error to report to the client as an OpenAI error object."""

    status: int = 500
    error_type: str = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code

    def to_dict(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


class BadRequestError(OpenAIError):
    """A client mistake: HTTP 400, Triton INVALID_ARG."""

    status = 400
    error_type = "invalid_request_error"


class NotFoundError(OpenAIError):
    """An unknown model or adapter: HTTP 404, Triton NOT_FOUND."""

    status = 404
    error_type = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = "model", code: str | None = "model_not_found"):
        super().__init__(message, param=param, code=code)


class UnavailableError(OpenAIError):
    """The generation model cannot take the request now: HTTP 503, Triton UNAVAILABLE."""

    status = 503
    error_type = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = "service_unavailable"):
        super().__init__(message, param=param, code=code)


class InternalError(OpenAIError):
    """A failure on our side or in the generation model: HTTP 500, Triton INTERNAL."""

    status = 500
    error_type = "server_error"


class CancelledError(OpenAIError):
    """The client went away; reported with Triton's CANCELLED code."""

    status = 499
    error_type = "cancelled"
