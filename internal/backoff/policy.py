"""Retry policies on tenacity.

Workload retries (spec.retryPolicy): retry ``n`` (1-based) waits a random time in
``[backoffSeconds, min(maxBackoffSeconds, backoffSeconds * 2^(n-1))]``: tenacity's
``wait_exponential`` gives the upper bound, and an injected RNG the jitter, so the
delays are reproducible in tests. Never less than backoffSeconds (no hot loop),
never more than maxBackoffSeconds (nor a day, MAX_DELAY_SECONDS). After
``maxRetries`` retries, give up.

Cluster errors (429, 5xx, connection failures): ``retrying_call`` retries a call a
few times with the same kind of jittered exponential backoff, then re-raises.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

import tenacity
from tenacity.wait import wait_base

P = ParamSpec("P")
T = TypeVar("T")

#: HTTP statuses of transient cluster errors
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
#: no workload delay is longer (the CRD's maximum, api/v1alpha1 MAX_BACKOFF_SECONDS):
#: an object stored before that bound must not overflow its next retry time
MAX_DELAY_SECONDS = 86_400.0


@dataclass(frozen=True, slots=True)
class Policy:
    max_retries: int = 5
    backoff_seconds: float = 10.0
    max_backoff_seconds: float = 300.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.backoff_seconds <= 0 or self.max_backoff_seconds <= 0:
            raise ValueError(f"invalid retry policy {self}")

    @classmethod
    def of(cls, spec: Any) -> Policy:
        """From anything with max_retries / backoff_seconds / max_backoff_seconds
        attributes (e.g. api.v1alpha1 RetryPolicy), or None for the defaults."""
        if spec is None:
            return cls()
        if isinstance(spec, Policy):
            return spec
        base = min(float(spec.backoff_seconds), MAX_DELAY_SECONDS)
        return cls(
            max_retries=int(spec.max_retries),
            backoff_seconds=base,
            max_backoff_seconds=max(min(float(spec.max_backoff_seconds), MAX_DELAY_SECONDS),
                                    base),
        )


def _state(attempt: int) -> tenacity.RetryCallState:
    st = tenacity.RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    st.attempt_number = attempt
    return st


def upper_bound(attempt: int, policy: Policy) -> float:
    """min(cap, base * 2^(attempt-1)), from tenacity's wait_exponential."""
    w = tenacity.wait_exponential(
        multiplier=policy.backoff_seconds,
        exp_base=2,
        min=policy.backoff_seconds,
        max=max(policy.max_backoff_seconds, policy.backoff_seconds),
    )
    return float(w(_state(max(1, attempt))))


def next_delay(attempt: int, policy: Any, rng: random.Random) -> float:
    """Seconds to wait before retry ``attempt`` (1-based). Pure given ``rng``."""
    pol = Policy.of(policy)
    hi = upper_bound(attempt, pol)
    lo = min(pol.backoff_seconds, hi)
    return lo + rng.uniform(0.0, hi - lo)


def should_retry(retries_done: int, policy: Any) -> bool:
    """May another retry follow ``retries_done`` retries?"""
    return retries_done < Policy.of(policy).max_retries


def next_retry_time(now: datetime, attempt: int, policy: Any, rng: random.Random) -> datetime:
    """``now`` (injected clock) plus next_delay, for status.nextRetryTime."""
    return now + timedelta(seconds=next_delay(attempt, policy, rng))


class wait_jittered_exponential(wait_base):
    """tenacity wait strategy: next_delay with an injected RNG."""

    def __init__(self, policy: Policy, rng: random.Random | None = None) -> None:
        self.policy = policy
        self.rng = rng if rng is not None else random.Random()

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return next_delay(retry_state.attempt_number, self.policy, self.rng)


def is_transient(exc: BaseException) -> bool:
    """Errors of the cluster worth retrying: HTTP 408/429/5xx (objects with a
    ``status`` attribute, like kubernetes' ApiException) and connection trouble.
    Conflicts (409) are not: the caller re-reads and reconciles again."""
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return status in RETRYABLE_STATUSES
    return isinstance(exc, ConnectionError | TimeoutError) or type(exc).__name__ in {
        "MaxRetryError",
        "ProtocolError",
        "NewConnectionError",
        "ReadTimeoutError",
    }


def retrying_call(
    *,
    attempts: int = 5,
    base: float = 0.2,
    cap: float = 5.0,
    retry_on: Callable[[BaseException], bool] = is_transient,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """Decorator: retry transient cluster errors up to ``attempts`` calls in all,
    waiting next_delay(base, cap) between them; re-raise the last error."""
    policy = Policy(max_retries=max(attempts - 1, 0), backoff_seconds=base, max_backoff_seconds=cap)

    def deco(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            retryer = tenacity.Retrying(
                stop=tenacity.stop_after_attempt(max(attempts, 1)),
                wait=wait_jittered_exponential(policy, rng),
                retry=tenacity.retry_if_exception(retry_on),
                sleep=sleep,
                reraise=True,
            )
            return retryer(fn, *args, **kwargs)

        return wrapper

    return deco
