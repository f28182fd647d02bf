"""Event recorder: core/v1 Events about objects (port of client-go's tools/record).

Events are written by a background thread through a client of their own (the manager's
``events_client``: its own token bucket, as kube-scheduler's event broadcaster has), so
recording never blocks a reconcile and Events never use the controllers' request budget.
Before it is written, every occurrence passes an :class:`EventCorrelator` (see
``runtime/eventcorrelator.py``): a spam filter per source and object, aggregation of
similar events (same object, type and reason, different messages) into one combined
Event, and counting of repeats as patches of ``count`` and ``lastTimestamp``.

Nothing is lost silently: an occurrence that is not written is counted in
``events_dropped_total{component,cause}`` and logged, with cause ``spam`` (the filter;
logged at debug), ``buffer_full`` (more than ``buffer`` waiting), ``namespace_gone``
(the namespace is being deleted) or ``write_failed`` (every attempt failed). A create is
retried by the client (its name is unique, so AlreadyExists means an earlier attempt
landed); a patch of an Event deleted meanwhile creates it again with the same count.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any

import structlog

from runtime import errors, metrics
from runtime.client import Client
from runtime.eventcorrelator import MAX_MESSAGE, EventCorrelator, Occurrence, Write

log = structlog.get_logger("runtime.events")

JSON = dict[str, Any]
NORMAL = "Normal"
WARNING = "Warning"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Records Events about objects; ``correlator`` (default: client-go's limits) decides
    which occurrences become new Events, patches of earlier ones, or drops."""

    def __init__(
        self,
        client: Client,
        component: str,
        host: str | None = None,
        buffer: int = 1000,
        correlator: EventCorrelator | None = None,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host or socket.gethostname()
        self.correlator = correlator or EventCorrelator()
        self._q: queue.Queue[tuple[JSON, Occurrence, str] | None] = queue.Queue(maxsize=buffer)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.dropped = 0

    # ---------------------------------------------------------------- public
    def event(self, obj: JSON, event_type: str, reason: str, message: str) -> None:
        """Record an event about ``obj`` (asynchronously; never blocks)."""
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
        occ = Occurrence(
            source=f"{self.component}/{self.host}",
            involved=(ref["apiVersion"], ref["kind"], ref["namespace"], ref["name"], ref["uid"]),
            type=event_type,
            reason=reason,
            message=message[:MAX_MESSAGE],
        )
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="event-recorder", daemon=True
                )
                self._thread.start()
        try:
            self._q.put_nowait((ref, occ, _now()))
        except queue.Full:
            total = self._drop("buffer_full")
            if total == 1 or total % 100 == 0:
                log.warning("events.dropped", cause="buffer_full", reason=reason,
                            object=ref["name"], total=total)

    def _drop(self, cause: str) -> int:
        with self._lock:
            self.dropped += 1
            total = self.dropped
        metrics.events_dropped_total.labels(self.component, cause).inc()
        return total

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
                ref, occ, stamp = item
                plan = self.correlator.correlate(occ, stamp)
                if plan is None:
                    self._drop("spam")
                    log.debug("events.dropped", cause="spam", reason=occ.reason,
                              object=f"{ref['namespace']}/{ref['name']}")
                else:
                    self._write(ref, occ, plan, stamp)
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

    def _write(self, ref: JSON, occ: Occurrence, plan: Write, stamp: str) -> None:
        ns = ref["namespace"] or "default"
        if plan.count > 1:
            try:
                self.client.request(
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/events/{plan.name}",
                    body={"count": plan.count, "lastTimestamp": stamp, "message": plan.message},
                    content_type="application/merge-patch+json",
                )
                return
            except errors.NotFound:
                pass  # deleted meanwhile (or its create failed): create it, count kept
        ev = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": plan.name, "namespace": ns},
            "involvedObject": {k: v for k, v in ref.items() if v},
            "reason": occ.reason,
            "message": plan.message,
            "type": occ.type,
            "source": {"component": self.component, "host": self.host},
            "firstTimestamp": plan.first_timestamp,
            "lastTimestamp": stamp,
            "count": plan.count,
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }
        # AlreadyExists: an earlier attempt of this very create landed (unique name).
        with contextlib.suppress(errors.AlreadyExists):
            self.client.request(
                "POST", f"/api/v1/namespaces/{ns}/events", body=ev, idempotent_=True
            )
