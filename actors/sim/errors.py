"""Kubernetes-shaped API errors, shared by the simulated cluster and (for mapping) the real one.

Every error carries the HTTP ``code``, the Kubernetes ``reason`` (``StatusReason``) and a message
worded like the real API server's, and can render itself as a ``v1.Status`` object. Use
:func:`api_error_for` to build the matching subclass from a code/reason pair (for example from a
``kubernetes.client.ApiException``).
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "APIError",
    "AlreadyExistsError",
    "BadRequestError",
    "ConflictError",
    "ForbiddenError",
    "GoneError",
    "InvalidError",
    "MethodNotAllowedError",
    "NotFoundError",
    "api_error_for",
]


class APIError(Exception):
    """An API request failed. ``code`` is the HTTP status code, ``reason`` the Kubernetes reason."""

    default_code: ClassVar[int] = 500
    default_reason: ClassVar[str] = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = self.default_code if code is None else code
        self.reason = self.default_reason if reason is None else reason
        self.details: dict[str, Any] = dict(details or {})

    def to_status(self) -> dict[str, Any]:
        """The error as a Kubernetes ``v1.Status`` object."""
        status: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            status["details"] = dict(self.details)
        return status

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, reason={self.reason!r}, message={self.message!r})"


class BadRequestError(APIError):
    default_code = 400
    default_reason = "BadRequest"


class ForbiddenError(APIError):
    default_code = 403
    default_reason = "Forbidden"


class NotFoundError(APIError):
    default_code = 404
    default_reason = "NotFound"


class MethodNotAllowedError(APIError):
    default_code = 405
    default_reason = "MethodNotAllowed"


class AlreadyExistsError(APIError):
    """409 AlreadyExists: create of a name that is taken."""

    default_code = 409
    default_reason = "AlreadyExists"


class ConflictError(APIError):
    """409 Conflict: optimistic-concurrency failure (stale resourceVersion, failed precondition)."""

    default_code = 409
    default_reason = "Conflict"


class GoneError(APIError):
    """410: the requested resourceVersion is older than the retained history (compacted)."""

    default_code = 410
    default_reason = "Expired"


class InvalidError(APIError):
    """422: the object failed validation."""

    default_code = 422
    default_reason = "Invalid"


_BY_REASON: dict[str, type[APIError]] = {
    "BadRequest": BadRequestError,
    "Forbidden": ForbiddenError,
    "NotFound": NotFoundError,
    "MethodNotAllowed": MethodNotAllowedError,
    "AlreadyExists": AlreadyExistsError,
    "Conflict": ConflictError,
    "Expired": GoneError,
    "Gone": GoneError,
    "Invalid": InvalidError,
}
_BY_CODE: dict[int, type[APIError]] = {
    400: BadRequestError,
    403: ForbiddenError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    409: ConflictError,
    410: GoneError,
    422: InvalidError,
}


def api_error_for(code: int, reason: str | None, message: str) -> APIError:
    """Build the most specific :class:`APIError` subclass for an HTTP code and Kubernetes reason."""
    cls = _BY_REASON.get(reason or "") or _BY_CODE.get(code) or APIError
    return cls(message, code=code, reason=reason or cls.default_reason)
