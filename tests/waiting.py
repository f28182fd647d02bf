"""Polling for tests that wait on the cluster: condition-based, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(fn: Callable[[], T], timeout: float = 30.0, interval: float = 0.1,
               what: str = "condition") -> T:
    """Calls ``fn`` until it returns a truthy value, and returns that value; fails the
    test with the last value or error after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = fn()
            if value:
                return value
            last = value
        except AssertionError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s; last: {last!r}")
        time.sleep(interval)
