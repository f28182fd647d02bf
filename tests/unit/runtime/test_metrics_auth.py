"""runtime.metrics_auth decisions against a stand-in of the two review APIs (the real
ones are exercised in tests/integration/runtime/test_metrics_auth.py)."""

from __future__ import annotations

from typing import Any

from runtime import errors
from runtime.metrics_auth import MetricsAuthorizer


class Reviews:
    """TokenReview: ``tokens`` maps a token to its user; SubjectAccessReview: users in
    ``allowed`` may get any path."""

    def __init__(self) -> None:
        self.tokens = {"good": "prometheus", "other": "someone"}
        self.allowed = {"prometheus"}
        self.calls = 0
        self.down = False

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        self.calls += 1
        if self.down:
            raise errors.ApiError(503, "ServiceUnavailable", "down")
        if path.endswith("tokenreviews"):
            user = self.tokens.get(body["spec"]["token"])
            return {"status": {"authenticated": user is not None,
                               "user": {"username": user} if user else {}}}
        return {"status": {"allowed": body["spec"]["user"] in self.allowed}}


def test_verdicts() -> None:
    auth = MetricsAuthorizer(Reviews())
    assert auth.check({}, "/metrics")[0] == 401
    assert auth.check({"Authorization": "Basic abc"}, "/metrics")[0] == 401
    assert auth.check({"Authorization": "Bearer nope"}, "/metrics") == (
        401, "the token was not accepted")
    assert auth.check({"Authorization": "Bearer other"}, "/metrics") == (
        403, 'user "someone" may not get /metrics')
    assert auth.check({"Authorization": "Bearer good"}, "/metrics") is None


def test_answers_are_cached_for_the_ttl_and_bounded() -> None:
    now = [0.0]
    api = Reviews()
    auth = MetricsAuthorizer(api, ttl=60, max_entries=2, clock=lambda: now[0])
    assert auth.check({"Authorization": "Bearer good"}, "/metrics") is None
    calls = api.calls
    api.allowed.clear()  # the cached answer stands until the ttl passes
    assert auth.check({"Authorization": "Bearer good"}, "/metrics") is None
    assert api.calls == calls
    now[0] = 61
    assert auth.check({"Authorization": "Bearer good"}, "/metrics")[0] == 403
    api.allowed.add("prometheus")
    now[0] = 200
    assert auth.check({"Authorization": "Bearer good"}, "/metrics") is None
    for t in ("a", "b"):  # two newer tokens push "good" out of a 2-entry cache
        auth.check({"Authorization": f"Bearer {t}"}, "/metrics")
    calls = api.calls
    auth.check({"Authorization": "Bearer good"}, "/metrics")
    assert api.calls > calls


def test_an_unreachable_api_never_serves_unchecked() -> None:
    api = Reviews()
    api.down = True
    assert MetricsAuthorizer(api).check({"Authorization": "Bearer good"}, "/metrics")[0] == 503
