"""Typed API errors carrying the server's ``Status`` message (port of apimachinery's errors)."""

from __future__ import annotations

from typing import Any

import orjson


class ApiError(Exception):
    """An error answered by the API server (or a transport failure, ``status == 0``)."""

    def __init__(
        self,
        status: int,
        reason: str = "",
        message: str = "",
        body: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        self.retry_after_header: float | None = None  # seconds, from a Retry-After header
        super().__init__(f"{status} {reason}: {message}".strip())

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked us to wait (Retry-After header or Status details)."""
        if self.retry_after_header is not None:
            return self.retry_after_header
        v = self.details.get("retryAfterSeconds")
        return float(v) if v is not None else None

    @property
    def details(self) -> dict[str, Any]:
        return self.body.get("details") or {}


class BadRequest(ApiError):
    pass


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class MethodNotAllowed(ApiError):
    pass


class Conflict(ApiError):
    pass


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists (a subclass of Conflict, as in HTTP)."""


class Gone(ApiError):
    """410: the requested resourceVersion is too old (expired); relist."""


class Invalid(ApiError):
    """422: the object failed validation; ``causes`` lists the fields."""

    @property
    def causes(self) -> list[dict[str, Any]]:
        return list(self.details.get("causes") or [])


#: the Status cause kube-apiserver gives when a PodDisruptionBudget refuses an eviction
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"


class TooManyRequests(ApiError):
    """429: the server (priority and fairness, max-inflight) refused, see
    ``retry_after``; or a PodDisruptionBudget refused an eviction, see
    ``disruption_budget`` (the same status, with a ``DisruptionBudget`` cause)."""

    @property
    def disruption_budget(self) -> str | None:
        """What the budget said ("The disruption budget NAME needs 1 healthy pods and
        has 1 currently"), when a PodDisruptionBudget refused; None for throttling."""
        for cause in self.details.get("causes") or ():
            # a StatusCause's type is its "reason" field on the wire
            if isinstance(cause, dict) and cause.get("reason") == DISRUPTION_BUDGET_CAUSE:
                return str(cause.get("message") or "") or "a PodDisruptionBudget refused"
        return None

    def __str__(self) -> str:
        budget = self.disruption_budget
        return f"{super().__str__()} {budget}" if budget else super().__str__()


class NotLeader(ApiError):
    """A write refused on our side: this process no longer holds (or never held) the
    leader Lease, so it must not change the cluster. Never retried."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "NotLeader", message)


class InternalError(ApiError):
    pass


class ServerTimeout(ApiError):
    pass


class ServiceUnavailable(ApiError):
    pass


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    500: InternalError,
    503: ServiceUnavailable,
    504: ServerTimeout,
}


def from_status(
    status: int, body: bytes | dict[str, Any] | None, retry_after: float | None = None
) -> ApiError:
    """Build the typed error for an HTTP status and a (possibly ``Status``) body.

    A body that is not a ``Status`` (an HTML page from a proxy, plain text) becomes the
    message, cut to 1,000 characters, with reason ``NonStatusBody``."""
    data: dict[str, Any] = {}
    if isinstance(body, dict):
        data = body
    elif body:
        try:
            parsed = orjson.loads(body)
            if isinstance(parsed, dict):
                data = parsed
        except orjson.JSONDecodeError:
            data = {"message": body.decode("utf-8", "replace")[:1000], "reason": "NonStatusBody"}
    try:
        code = int(data.get("code") or status)
    except (TypeError, ValueError):
        code = status
    reason = str(data.get("reason") or "")
    message = str(data.get("message") or "")
    cls = _BY_STATUS.get(code, ApiError)
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    err = cls(code, reason, message, data)
    err.retry_after_header = retry_after
    return err


def is_not_found(err: BaseException) -> bool:
    return isinstance(err, NotFound)


def is_conflict(err: BaseException) -> bool:
    return isinstance(err, Conflict) and not isinstance(err, AlreadyExists)


def is_already_exists(err: BaseException) -> bool:
    return isinstance(err, AlreadyExists)


def is_gone(err: BaseException) -> bool:
    return isinstance(err, Gone)
