"""Polling for tests that wait on the cluster: condition-based, never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from runtime import errors

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


def watched(client: Any, api_version: str, kind: str, namespace: str | None, name: str,
            check: Callable[[dict], T], timeout: float = 30.0, what: str = "condition") -> T:
    """Waits until ``check(obj)`` is truthy for one version of the named object, and
    returns its value. Reads the object, then follows it with a watch from that read,
    so a state it passes through only briefly (a condition the next reconcile
    replaces) is seen however slow the machine; a watch that ends or fails is
    resumed from a fresh read. Fails the test with the last status seen."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            obj = client.get(api_version, kind, name, namespace)
        except errors.NotFound:
            obj, rv = None, None
        else:
            value = check(obj)
            if value:
                return value
            last, rv = obj.get("status"), obj["metadata"]["resourceVersion"]
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{what} not met within {timeout}s; last: {last!r}")
        if rv is None:
            time.sleep(min(0.1, left))
            continue
        try:
            stream = client.watch(api_version, kind, namespace=namespace, resource_version=rv,
                                  timeout_seconds=max(1, int(left)),
                                  field_selector=f"metadata.name={name}")
            for event in stream:
                if event.get("type") not in ("ADDED", "MODIFIED"):
                    continue
                value = check(event["object"])
                last = event["object"].get("status")
                if value:
                    stream.close()
                    return value
                if time.monotonic() > deadline:
                    stream.close()
                    break
        except errors.ApiError:
            time.sleep(0.1)
