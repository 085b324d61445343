"""OpenAI-shaped errors.

Every failure a client can see is an `OpenAIError`: an HTTP-like status plus the body
OpenAI sends, `{"error": {"message", "type", "param", "code"}}`. The Triton layer turns
the status into a Triton error code (see `tritonchat.triton`), which Triton's HTTP
endpoints map back to the same status.
"""

from __future__ import annotations

import json


_UNSET = object()


class ConfigError(ValueError):
    """A configuration mistake; raised at model load so the model fails to load with a clear message."""


class OpenAIError(Exception):
    """An error to report to the client as an OpenAI error object."""

    status: int = 500
    error_type: str = "server_error"
    default_param: str | None = None
    default_code: str | None = None

    def __init__(self, message: str, *, param: str | None = _UNSET, code: str | None = _UNSET):  # type: ignore[assignment]
        super().__init__(message)
        self.message = message
        self.param = self.default_param if param is _UNSET else param
        self.code = self.default_code if code is _UNSET else code

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
    default_param = "model"
    default_code = "model_not_found"


class UnavailableError(OpenAIError):
    """The generation model cannot take the request now: HTTP 503, Triton UNAVAILABLE."""

    status = 503
    error_type = "server_error"
    default_code = "service_unavailable"


class InternalError(OpenAIError):
    """A failure on our side or in the generation model: HTTP 500, Triton INTERNAL."""

    status = 500
    error_type = "server_error"


class CancelledError(OpenAIError):
    """The client went away; reported with Triton's CANCELLED code."""

    status = 499
    error_type = "cancelled"


# Every kind of error this package sends, most specific first: the one table from which a client
# that gets only the error object (Triton 2.51's generate endpoints answer 400 for any error; gRPC
# carries only the message) reads its HTTP status back.
ERROR_KINDS: tuple[type[OpenAIError], ...] = (NotFoundError, UnavailableError, CancelledError, BadRequestError,
                                              InternalError)


def status_of(error: dict) -> int:
    """The HTTP status of an OpenAI error object as this package sends it: a kind with a code of
    its own is known by that code, the others by their type; anything else is a 500."""
    kind, code = error.get("type"), error.get("code")
    for error_class in ERROR_KINDS:
        if error_class.default_code is not None and code == error_class.default_code:
            return error_class.status
    for error_class in ERROR_KINDS:
        if error_class.default_code is None and kind == error_class.error_type:
            return error_class.status
    return InternalError.status
