"""Named health checks behind ``/healthz`` and ``/readyz`` (controller-runtime's healthz).

A check is a callable: it passes by returning None/True, fails by returning False or a
message, or by raising.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from urllib.parse import parse_qs

Checker = Callable[[], object]


def ping() -> None:
    return None


class Checks:
    def __init__(self) -> None:
        self._checks: dict[str, Checker] = {}
        self._lock = threading.Lock()

    def add(self, name: str, check: Checker) -> None:
        with self._lock:
            self._checks[name] = check

    def run(self) -> tuple[bool, list[tuple[str, bool, str]]]:
        with self._lock:
            checks = list(self._checks.items())
        results = []
        for name, fn in checks:
            try:
                r = fn()
                ok = r is None or r is True
                msg = "" if ok else (r if isinstance(r, str) else "failed")
            except Exception as e:
                ok, msg = False, str(e)
            results.append((name, ok, msg))
        return all(ok for _, ok, _ in results), results

    def handle(self, query: str) -> tuple[int, str, bytes]:
        q = parse_qs(query, keep_blank_values=True)
        ok, results = self.run()
        if "check" in q:
            wanted = q["check"][0]
            results = [r for r in results if r[0] == wanted]
            if not results:
                return 404, "text/plain", f"no check {wanted}\n".encode()
            ok = results[0][1]
        if "verbose" in q or not ok:
            lines = [
                f"[{'+' if c_ok else '-'}]{name} {'ok' if c_ok else 'failed: ' + msg}"
                for name, c_ok, msg in results
            ]
            lines.append("healthz check passed" if ok else "healthz check failed")
            body = "\n".join(lines) + "\n"
        else:
            body = "ok"
        return (200 if ok else 500), "text/plain; charset=utf-8", body.encode()
