"""Which failures the client retries, how long it waits, and bad bytes on the wire."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from runtime import errors
from runtime.informer import strip_managed_fields
from runtime.retry import Backoff, RetryPolicy, idempotent, parse_retry_after, retryable
from runtime.watch import _watch_event

MERGE = "application/merge-patch+json"
JSONPATCH = "application/json-patch+json"


def err(status: int, reason: str = "") -> errors.ApiError:
    return errors.from_status(status, {"code": status, "reason": reason}) if status else \
        errors.ApiError(0, reason or "TransportError", "boom")


@pytest.mark.parametrize(("method", "ctype", "expected"), [
    ("GET", None, True), ("PUT", None, True), ("DELETE", None, True),
    ("PATCH", MERGE, True), ("PATCH", JSONPATCH, False), ("POST", None, False),
])
def test_idempotent_methods(method: str, ctype: str | None, expected: bool) -> None:
    assert idempotent(method, ctype) is expected


@pytest.mark.parametrize(("error", "method", "expected"), [
    (err(429), "POST", True),  # never processed: safe for a create too
    (err(0, "ConnectionRefused"), "POST", True),  # never sent
    (err(500), "POST", False),  # may have been applied
    (err(0, "TransportError"), "POST", False),  # a reset after sending
    (err(503), "GET", True),
    (err(502), "PUT", True),
    (err(0, "BadResponse"), "GET", True),
    (err(409, "Conflict"), "PUT", False),
    (err(404), "GET", False),
    (err(422), "POST", False),
    (errors.NotLeader("lost"), "PUT", False),
])
def test_retryable(error: errors.ApiError, method: str, expected: bool) -> None:
    assert retryable(error, method, idempotent(method, None)) is expected


def refused_by_budget(retry_after: int = 0) -> errors.ApiError:
    """kube-apiserver's answer to an eviction a PodDisruptionBudget refuses."""
    says = "The disruption budget keep needs 1 healthy pods and has 1 currently"
    details: dict = {"causes": [{"reason": "DisruptionBudget", "message": says}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return errors.from_status(429, {
        "code": 429, "reason": "TooManyRequests", "details": details,
        "message": "Cannot evict pod as it would violate the pod's disruption budget."})


def test_a_budget_refusal_is_raised_while_throttling_is_retried() -> None:
    """A 429 carrying a DisruptionBudget cause is an answer, with a Retry-After or
    without; the same status from priority and fairness is throttling."""
    throttled = errors.from_status(429, {"code": 429, "reason": "TooManyRequests",
                                         "message": "Too many requests, please try again later.",
                                         "details": {"retryAfterSeconds": 1}})
    assert retryable(throttled, "POST", False)
    for refused in (refused_by_budget(), refused_by_budget(retry_after=10)):
        assert isinstance(refused, errors.TooManyRequests)
        assert not retryable(refused, "POST", False)
        assert "The disruption budget keep needs 1 healthy pods" in str(refused)
    assert throttled.disruption_budget is None  # type: ignore[attr-defined]


def test_retry_after_header_and_status_details() -> None:
    assert parse_retry_after("3") == 3.0
    when = datetime.now(UTC) + timedelta(seconds=30)
    assert 25 <= (parse_retry_after(format_datetime(when, usegmt=True)) or 0) <= 31
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    e = errors.from_status(429, b'{"code":429,"details":{"retryAfterSeconds":2}}')
    assert isinstance(e, errors.TooManyRequests) and e.retry_after == 2.0
    e = errors.from_status(503, b"", retry_after=7.0)
    assert e.retry_after == 7.0


def test_backoff_honours_retry_after_capped_else_jittered_within_bounds() -> None:
    policy = RetryPolicy(attempts=5, base=0.2, cap=2.0, max_retry_after=10.0)
    b = Backoff(policy, rng=random.Random(4))
    assert b.delay(1, errors.from_status(503, b"", retry_after=3.0)) == 3.0
    assert b.delay(1, errors.from_status(429, b"", retry_after=600.0)) == 10.0
    waits = [b.delay(n) for n in range(1, 9) for _ in range(20)]
    assert all(policy.base / 2 <= w <= policy.cap for w in waits)
    assert len({round(w, 6) for w in waits}) > 100  # jittered, not a fixed ladder


def test_html_502_from_a_proxy_is_a_clear_error() -> None:
    e = errors.from_status(502, b"<html><title>502 Bad Gateway</title></html>")
    assert e.status == 502 and e.reason == "NonStatusBody"
    assert "502 Bad Gateway" in e.message


def test_watch_line_that_is_not_json_says_what_came() -> None:
    assert _watch_event(b'{"type":"ADDED","object":{}}')["type"] == "ADDED"
    with pytest.raises(errors.ApiError) as ei:
        _watch_event(b'{"type":"MODIFIED","obj')
    assert ei.value.reason == "BadWatchData" and "MODIFIED" in ei.value.message


def test_informer_transform_strips_managed_fields() -> None:
    obj = {"metadata": {"name": "p", "managedFields": [{"manager": "kubectl"}]}, "spec": {}}
    assert strip_managed_fields(obj) == {"metadata": {"name": "p"}, "spec": {}}


class _AlwaysGone:
    """A client whose list works and whose every watch answers 410 Gone."""

    def __init__(self) -> None:
        self.lists = 0

    def list(self, *a: object, **kw: object) -> dict:
        self.lists += 1
        return {"items": [], "metadata": {"resourceVersion": str(self.lists)}}

    def watch(self, *a: object, **kw: object) -> None:
        raise errors.Gone(410, "Expired", "too old resource version")


class _Sink:
    def replace(self, items: list, rv: str) -> None:
        pass

    def watch_event(self, t: str, obj: dict) -> None:
        pass


class _CountingStop:
    """Stands in for the reflector's stop event: records each wait, stops after ``n``."""

    def __init__(self, n: int) -> None:
        self.waits: list[float] = []
        self.n = n

    def is_set(self) -> bool:
        return len(self.waits) >= self.n

    def wait(self, t: float) -> bool:
        self.waits.append(t)
        return self.is_set()

    def set(self) -> None:
        self.n = 0


def test_reflector_backs_off_when_every_watch_is_gone() -> None:
    from runtime.reflector import Reflector

    client = _AlwaysGone()
    r = Reflector(client, "v1", "ConfigMap", _Sink(), backoff_initial=0.5, backoff_max=8.0)  # type: ignore[arg-type]
    stop = _CountingStop(6)
    r._stop = stop  # type: ignore[assignment]
    r.run()
    # The first 410 relists at once; every later one waits, longer and longer.
    assert client.lists == 7
    assert all(w > 0 for w in stop.waits)
    assert stop.waits[-1] > stop.waits[0]


def test_live_holder_is_someone_else_with_an_unexpired_renewal() -> None:
    from runtime.leaderelection import live_holder

    def lease(holder: str, renewed: str = "2026-01-01T00:00:00.000000Z",
              duration: int = 15) -> dict:
        return {"spec": {"holderIdentity": holder, "renewTime": renewed,
                         "leaseDurationSeconds": duration}}

    t = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert live_holder(lease("a"), "me", t + 10) == "a"
    assert live_holder(lease("a"), "me", t + 16) is None  # expired
    assert live_holder(lease("me"), "me", t) is None  # ourselves
    assert live_holder(lease(""), "me", t) is None  # released
    assert live_holder(lease("a", renewed="garbage"), "me", t) == "a"  # unreadable: alive
