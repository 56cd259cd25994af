"""Classifying what the ``kubernetes`` client raises, and the error the kube Playground raises.

Every failure of a request ends up as a :class:`KubeError`, an :class:`actors.base.ActorError` that
also carries the HTTP status code and the Kubernetes ``Status.reason``. Transient failures are
server errors (5xx), throttling (429), timeouts and connection errors; those may be retried.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.retry import retry_after_seconds

from actors.base import ActorError

TRANSIENT_CODES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Failure:
    """What went wrong with one request.

    ``code`` is the HTTP status (None when no response arrived); ``reason`` the Kubernetes
    ``Status.reason`` (``NotFound``, ``AlreadyExists``, ``Conflict``, ...) or the exception type;
    ``sent`` is False when the request certainly never reached the server (connect failed), so
    even a non-idempotent request may be repeated; ``retry_after`` is the server's Retry-After."""

    code: int | None
    reason: str
    message: str
    transient: bool
    sent: bool = True
    retry_after: float | None = None
    status: dict[str, Any] | None = None  # the Kubernetes Status body, when there was one

    @property
    def code_label(self) -> str:
        """The ``code`` label of request counters: the HTTP status or ``error``."""
        return str(self.code) if self.code else "error"


class KubeError(ActorError):
    """A Kubernetes API request failed (after any retries)."""

    def __init__(
        self, message: str, failure: Failure | None = None, *, transient: bool | None = None
    ) -> None:
        if transient is None:
            transient = failure.transient if failure is not None else False
        super().__init__(message, transient=transient)
        self.failure = failure

    @property
    def code(self) -> int | None:
        return self.failure.code if self.failure else None

    @property
    def reason(self) -> str:
        return self.failure.reason if self.failure else ""


def _status_body(body: Any) -> dict[str, Any] | None:
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not isinstance(body, str) or not body.strip().startswith("{"):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("kind") == "Status" else None


def _unsent(exc: BaseException) -> bool:
    """True for failures that happen before a single byte of the request was sent."""
    return isinstance(
        exc,
        urllib3.exceptions.NewConnectionError
        | urllib3.exceptions.ConnectTimeoutError
        | ConnectionRefusedError,
    )


def classify(exc: BaseException) -> Failure | None:
    """A :class:`Failure` for errors of the HTTP layer; None for anything else (a bug: re-raise it)."""
    if isinstance(exc, KubeError) and exc.failure is not None:
        return exc.failure
    if isinstance(exc, ApiException):
        code = int(exc.status or 0)
        status = _status_body(exc.body)
        if code == 0:  # the client's wrapping of an SSL error: no HTTP response
            return Failure(None, "SSLError", str(exc.reason or exc), transient=True)
        reason = str((status or {}).get("reason") or exc.reason or "")
        message = str((status or {}).get("message") or (exc.body or "").strip() or exc.reason or "")
        return Failure(
            code,
            reason,
            message,
            transient=code in TRANSIENT_CODES,
            retry_after=retry_after_seconds(exc) if code in TRANSIENT_CODES else None,
            status=status,
        )
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        inner = classify(exc.reason)
        if inner is not None:
            return inner
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):  # OSError covers ssl, socket, timeouts
        return Failure(
            None, type(exc).__name__, str(exc) or type(exc).__name__, transient=True, sent=not _unsent(exc)
        )
    return None
