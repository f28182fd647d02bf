"""Counts preemptions as users see them: a watch of GPUWorkloads that records each
time a workload's ``Preempted`` condition turns True (or, already True, names
another preemptor or a newer transition), with the preemptor its message names.

A victim whose eviction was decided and told twice for one preemption (a kill -9
lost the status write of the first telling) shows one transition: only what the
API server stored is counted.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.types import API_VERSION
from runtime import Client

#: "reclaimed by queue q for ns/name; ..." or "preempted by ns/name (priority ...) ..."
_BY = re.compile(r"(?:reclaimed by queue \S+ for|preempted by) (\S+?)[;\s]")


@dataclass
class PreemptionWatch:
    client: Client
    namespaces: frozenset[str]
    #: (victim ns/name, preemptor ns/name) -> how many times it was preempted by it
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    _last: dict[str, tuple[str, str]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> PreemptionWatch:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._follow, args=(ready,), daemon=True,
                                        name="preemption-watch")
        self._thread.start()
        ready.wait(30)
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def repeated(self) -> dict[tuple[str, str], int]:
        """(victim, preemptor) pairs seen more than once."""
        with self._lock:
            return {k: n for k, n in self.counts.items() if n > 1}

    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def _follow(self, ready: threading.Event) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    items = self.client.list(API_VERSION, "GPUWorkload")
                    for w in items["items"]:
                        self._apply(w)
                    rv = items["metadata"]["resourceVersion"]
                    ready.set()
                for ev in self.client.watch(API_VERSION, "GPUWorkload", resource_version=rv,
                                            timeout_seconds=30):
                    if self._stop.is_set():
                        return
                    if ev["type"] == "ERROR":
                        rv = ""
                        break
                    rv = (ev["object"].get("metadata") or {}).get("resourceVersion") or rv
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self._apply(ev["object"])
            except Exception:
                rv = ""
                time.sleep(0.2)

    def _apply(self, w: dict[str, Any]) -> None:
        meta = w.get("metadata") or {}
        if meta.get("namespace") not in self.namespaces:
            return
        key = f"{meta['namespace']}/{meta['name']}|{meta.get('uid')}"
        cond = next((c for c in (w.get("status") or {}).get("conditions") or ()
                     if c.get("type") == "Preempted"), None)
        if cond is None or cond.get("status") != "True":
            with self._lock:
                self._last.pop(key, None)
            return
        m = _BY.search(str(cond.get("message") or "") + " ")
        seen = (str(cond.get("lastTransitionTime") or ""), m.group(1) if m else "?")
        with self._lock:
            if self._last.get(key) == seen:
                return
            self._last[key] = seen
            self.counts[(key.split("|")[0], seen[1])] += 1
