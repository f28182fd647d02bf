"""When the client retries a request, and how long it waits (client-go's rest retry, on tenacity).

Which failures are retried, by method:

=================================  =====================  ==============================
failure                            GET/HEAD/PUT/DELETE,   POST (create), JSON patch
                                   merge/apply patch
=================================  =====================  ==============================
429 Too Many Requests              retried                retried (never processed)
429 from a PodDisruptionBudget     raised                 raised
connection refused / not sent      retried                retried (never sent)
500/502/503/504, reset, timeout,   retried                raised, unless the caller says
broken or non-JSON response                               the call is idempotent (a create
                                                          whose AlreadyExists it handles)
any other status                   raised                 raised
=================================  =====================  ==============================

* A PUT carries ``metadata.resourceVersion``, so a PUT repeated after a lost answer gets
  409 Conflict instead of writing twice; a DELETE repeated gets 404. Both are errors the
  callers already handle.
* A 429 with a ``DisruptionBudget`` cause is not throttling: a budget refused an
  eviction, an answer the caller acts on (an Event, the pod asked again later).
  Retried, it came back after every backoff (about 2 s), and a budget not counted yet
  (``Retry-After: 10``) held a call without a deadline 10 s a time.
* ``Retry-After`` (header, or ``details.retryAfterSeconds`` of the Status body) is
  honoured, capped at :attr:`RetryPolicy.max_retry_after`; otherwise the wait is
  tenacity's exponential backoff with full jitter between ``base`` and ``cap``.
* Attempts are bounded (``attempts`` in all), and never past the caller's ``deadline``:
  a wait that would end after it is not taken, and the last error is raised.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from types import SimpleNamespace

from tenacity import wait_random_exponential

from runtime import errors

#: statuses after which a request that was sent may have been applied
SERVER_ERRORS = frozenset({500, 502, 503, 504})
#: methods whose repetition cannot apply a change twice
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
IDEMPOTENT_PATCHES = frozenset(
    {
        "application/merge-patch+json",
        "application/apply-patch+yaml",
        "application/strategic-merge-patch+json",
    }
)
#: transport failures where the request never reached the server
NOT_SENT_REASONS = frozenset({"ConnectionRefused", "ConnectTimeout"})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # calls in all, the first one included
    base: float = 0.2  # seconds
    cap: float = 5.0  # longest backoff between two attempts
    max_retry_after: float = 30.0  # longest Retry-After honoured

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base <= 0 or self.cap < self.base:
            raise ValueError(f"invalid retry policy {self}")


NO_RETRY = RetryPolicy(attempts=1)


def idempotent(method: str, content_type: str | None = None) -> bool:
    """May this request be repeated after it might have been applied?"""
    if method in IDEMPOTENT_METHODS:
        return True
    return method == "PATCH" and content_type in IDEMPOTENT_PATCHES


def retryable(err: BaseException, method: str, is_idempotent: bool) -> bool:
    """Is ``err`` (raised by one attempt of ``method``) worth another attempt?"""
    if not isinstance(err, errors.ApiError) or isinstance(err, errors.NotLeader):
        return False
    if err.status == 429:
        return not (isinstance(err, errors.TooManyRequests) and err.disruption_budget)
    if err.status == 0:
        return is_idempotent or err.reason in NOT_SENT_REASONS
    if err.status in SERVER_ERRORS:
        return is_idempotent
    return False


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class Backoff:
    """The wait before attempt ``n + 1`` after ``n`` failures."""

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None) -> None:
        self.policy = policy
        self._wait = wait_random_exponential(multiplier=policy.base, max=policy.cap)
        if rng is not None:  # reproducible in tests
            self._wait = _seeded(policy, rng)

    def delay(self, failures: int, err: BaseException | None = None) -> float:
        ra = getattr(err, "retry_after", None)
        if isinstance(ra, int | float) and ra >= 0:
            return min(float(ra), self.policy.max_retry_after)
        wait = float(self._wait(SimpleNamespace(attempt_number=failures)))  # type: ignore[arg-type]
        return max(wait, self.policy.base / 2)  # never a hot loop


def _seeded(policy: RetryPolicy, rng: random.Random):  # type: ignore[no-untyped-def]
    def wait(state: SimpleNamespace) -> float:
        hi = min(policy.cap, policy.base * 2 ** (state.attempt_number - 1))
        return rng.uniform(0.0, hi)

    return wait
