import random
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.v1alpha1.types import MAX_BACKOFF_SECONDS, RetryPolicy
from internal.backoff import (
    Policy,
    is_transient,
    next_delay,
    next_retry_time,
    retrying_call,
    should_retry,
    upper_bound,
)


def test_upper_bound_doubles_then_caps() -> None:
    p = Policy(max_retries=10, backoff_seconds=10, max_backoff_seconds=60)
    assert [upper_bound(n, p) for n in range(1, 6)] == [10, 20, 40, 60, 60]


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 30),
    st.integers(1, 100),
    st.integers(1, 1000),
    st.integers(0, 2**32),
)
def test_delay_within_bounds(attempt: int, base: int, cap: int, seed: int) -> None:
    p = Policy(5, base, max(cap, base))
    d = next_delay(attempt, p, random.Random(seed))
    assert base <= d <= max(cap, base)
    assert d <= base * 2 ** (attempt - 1)
    assert d == next_delay(attempt, p, random.Random(seed))  # same seed, same delay


def test_jitter_spreads() -> None:
    p = Policy(5, 1, 100)
    rng = random.Random(1)
    delays = {round(next_delay(6, p, rng), 3) for _ in range(20)}
    assert len(delays) > 10


def test_from_api_retry_policy() -> None:
    rp = RetryPolicy.model_validate({"maxRetries": 2, "backoffSeconds": 5})
    p = Policy.of(rp)
    assert p == Policy(2, 5.0, 300.0)
    assert should_retry(1, rp) and not should_retry(2, rp)
    assert next_delay(1, rp, random.Random(0)) == 5.0
    now = datetime(2024, 1, 1, tzinfo=UTC)
    assert next_retry_time(now, 1, rp, random.Random(0)) == datetime(
        2024, 1, 1, 0, 0, 5, tzinfo=UTC
    )


def test_invalid_policy() -> None:
    with pytest.raises(ValueError):
        Policy(-1, 1, 1)


class FakeApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def test_transient_classification() -> None:
    assert is_transient(FakeApiError(503)) and is_transient(FakeApiError(429))
    assert not is_transient(FakeApiError(409)) and not is_transient(FakeApiError(404))
    assert is_transient(ConnectionResetError()) and is_transient(TimeoutError())
    assert not is_transient(ValueError())


def test_retrying_call_retries_then_succeeds() -> None:
    sleeps: list[float] = []
    calls = []

    @retrying_call(attempts=4, base=0.5, cap=2, sleep=sleeps.append, rng=random.Random(3))
    def flaky(x: int) -> int:
        calls.append(x)
        if len(calls) < 3:
            raise FakeApiError(500)
        return x * 2

    assert flaky(21) == 42
    assert len(calls) == 3 and len(sleeps) == 2
    assert all(0.5 <= s <= 2 for s in sleeps)


def test_retrying_call_gives_up_and_reraises() -> None:
    sleeps: list[float] = []

    @retrying_call(attempts=3, sleep=sleeps.append)
    def down() -> None:
        raise FakeApiError(503)

    with pytest.raises(FakeApiError):
        down()
    assert len(sleeps) == 2


def test_retrying_call_does_not_retry_user_errors() -> None:
    sleeps: list[float] = []

    @retrying_call(sleep=sleeps.append)
    def conflict() -> None:
        raise FakeApiError(409)

    with pytest.raises(FakeApiError):
        conflict()
    assert sleeps == []


def test_a_backoff_stored_before_the_crds_maximum_never_overflows_the_retry_time() -> None:
    """Issue 23: backoffSeconds 2^40 gave `year 36869 is out of range` on every
    requeue; an object stored before the bound now waits at most a day."""
    spec = RetryPolicy.model_validate({"backoffSeconds": 1099511627776,
                                       "maxBackoffSeconds": 1099511627776})
    assert spec.backoff_seconds == spec.max_backoff_seconds == MAX_BACKOFF_SECONDS
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for attempt in (1, 5, 60):
        at = next_retry_time(now, attempt, spec, random.Random(0))
        assert (at - now).total_seconds() == MAX_BACKOFF_SECONDS
    # even a policy object that was never validated is clamped
    raw = type("Raw", (), {"max_retries": 3, "backoff_seconds": 2**40,
                           "max_backoff_seconds": 2**41})()
    assert next_delay(9, raw, random.Random(0)) <= MAX_BACKOFF_SECONDS
