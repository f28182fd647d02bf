"""Event recorder: core/v1 Events about objects (port of client-go's tools/record).

Events are written by a background thread through a client of their own (the manager's
``events_client``: its own token bucket, as kube-scheduler's event broadcaster has), so
recording never blocks a reconcile and Events never use the controllers' request budget.
When the buffer of 1000 is full, or every attempt of a write failed, the event is dropped
and counted in ``events_dropped_total{component,cause}``. A repeat of an event already
written (same object, type, reason and message) patches that Event's ``count`` and
``lastTimestamp`` instead of creating a new one, through a small LRU of recent events.
A create is retried by the client (its name is unique, so AlreadyExists means an earlier
attempt landed).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

import structlog

from runtime import errors, metrics
from runtime.client import Client

log = structlog.get_logger("runtime.events")

JSON = dict[str, Any]
NORMAL = "Normal"
WARNING = "Warning"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        client: Client,
        component: str,
        host: str | None = None,
        cache_size: int = 4096,
        buffer: int = 1000,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host or socket.gethostname()
        self._cache: OrderedDict[tuple[str, ...], tuple[str, str, int]] = OrderedDict()
        self._cache_size = cache_size
        self._q: queue.Queue[tuple[JSON, str, str, str] | None] = queue.Queue(maxsize=buffer)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0

    # ---------------------------------------------------------------- public
    def event(self, obj: JSON, event_type: str, reason: str, message: str) -> None:
        """Record an event about ``obj`` (asynchronously)."""
        if event_type not in (NORMAL, WARNING):
            raise ValueError(f"event type must be Normal or Warning, not {event_type!r}")
        md = obj.get("metadata") or {}
        ref = {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": md.get("name", ""),
            "namespace": md.get("namespace", ""),
            "uid": md.get("uid", ""),
            "resourceVersion": md.get("resourceVersion", ""),
        }
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="event-recorder", daemon=True
                )
                self._thread.start()
        try:
            self._q.put_nowait((ref, event_type, reason, message[:1024]))
        except queue.Full:
            self._drop("buffer_full")
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.warning("events.dropped", reason=reason, object=ref["name"], total=self.dropped)

    def _drop(self, cause: str) -> None:
        self.dropped += 1
        metrics.events_dropped_total.labels(self.component, cause).inc()

    def eventf(self, obj: JSON, event_type: str, reason: str, fmt: str, *args: Any) -> None:
        self.event(obj, event_type, reason, fmt % args if args else fmt)

    def normal(self, obj: JSON, reason: str, message: str) -> None:
        self.event(obj, NORMAL, reason, message)

    def warning(self, obj: JSON, reason: str, message: str) -> None:
        self.event(obj, WARNING, reason, message)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every recorded event has been written (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while self._q.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def stop(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        if self._thread is not None:
            with contextlib.suppress(queue.Full):
                self._q.put_nowait(None)

    # ---------------------------------------------------------------- writer
    def _run(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                self._write(*item)
            except (errors.Forbidden, errors.NotFound) as e:
                # A namespace being deleted, or gone, takes no new content: expected, and
                # nobody is left to read the Event.
                if "being terminated" in str(e) or "namespaces" in str(e):
                    self._drop("namespace_gone")
                    log.debug("events.write_skipped", error=str(e))
                else:
                    self._drop("write_failed")
                    log.warning("events.write_failed", error=str(e))
            except Exception as e:
                self._drop("write_failed")
                log.warning("events.write_failed", error=str(e))
            finally:
                self._q.task_done()

    def _write(self, ref: JSON, event_type: str, reason: str, message: str) -> None:
        ns = ref["namespace"] or "default"
        key = (ref["uid"], ref["kind"], ns, ref["name"], event_type, reason, message)
        now = _now()
        cached = self._cache.get(key)
        if cached is not None:
            name, _, count = cached
            try:
                self.client.request(
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/events/{name}",
                    body={"count": count + 1, "lastTimestamp": now},
                    content_type="application/merge-patch+json",
                )
                self._cache[key] = (name, ns, count + 1)
                self._cache.move_to_end(key)
                return
            except errors.NotFound:
                del self._cache[key]
        name = f"{ref['name']}.{time.time_ns():x}"
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {k: v for k, v in ref.items() if v},
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }
        # AlreadyExists: an earlier attempt of this very create landed (unique name).
        with contextlib.suppress(errors.AlreadyExists):
            self.client.request(
                "POST", f"/api/v1/namespaces/{ns}/events", body=ev, idempotent_=True
            )
        self._cache[key] = (name, ns, 1)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
