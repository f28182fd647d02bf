"""Retry policies built on tenacity (see policy.py)."""

from internal.backoff.policy import (
    RETRYABLE_STATUSES,
    Policy,
    is_transient,
    next_delay,
    next_retry_time,
    retrying_call,
    should_retry,
    upper_bound,
    wait_jittered_exponential,
)

__all__ = [
    "RETRYABLE_STATUSES",
    "Policy",
    "is_transient",
    "next_delay",
    "next_retry_time",
    "retrying_call",
    "should_retry",
    "upper_bound",
    "wait_jittered_exponential",
]
