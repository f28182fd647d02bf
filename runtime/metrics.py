"""Framework metrics under client-go's and controller-runtime's names.

All live in :data:`registry` (prometheus-client's default registry, so domain metrics
registered there are served by the manager's ``/metrics`` too).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from runtime.workqueue import WorkQueue

registry = REGISTRY

_QUEUE_BUCKETS = tuple(10.0**e for e in range(-8, 2))  # 1e-8 .. 10 s, like client-go

workqueue_adds_total = Counter(
    "workqueue_adds", "Total number of adds handled by workqueue", ["name"], registry=registry
)
workqueue_retries_total = Counter(
    "workqueue_retries", "Total number of retries handled by workqueue", ["name"], registry=registry
)
workqueue_queue_duration_seconds = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ["name"],
    buckets=_QUEUE_BUCKETS,
    registry=registry,
)
workqueue_work_duration_seconds = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    ["name"],
    buckets=_QUEUE_BUCKETS,
    registry=registry,
)

_RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30,
    40, 50, 60,
)  # fmt: skip

reconcile_total = Counter(
    "controller_runtime_reconcile",
    "Total number of reconciliations per controller",
    ["controller", "result"],
    registry=registry,
)
reconcile_errors_total = Counter(
    "controller_runtime_reconcile_errors",
    "Total number of reconciliation errors per controller",
    ["controller"],
    registry=registry,
)
terminal_reconcile_errors_total = Counter(
    "controller_runtime_terminal_reconcile_errors",
    "Total number of terminal reconciliation errors per controller",
    ["controller"],
    registry=registry,
)
reconcile_time_seconds = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=_RECONCILE_BUCKETS,
    registry=registry,
)
max_concurrent_reconciles = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ["controller"],
    registry=registry,
)
active_workers = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
    ["controller"],
    registry=registry,
)
leader_election_master_status = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 "
    "indicates master. 'name' is the string used to identify the lease.",
    ["name"],
    registry=registry,
)

# ---- the REST client (client-go's rest_client_* names) --------------------------------
_REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

rest_client_requests_total = Counter(
    "rest_client_requests",
    "Number of HTTP requests, partitioned by status code, method, and host. "
    "code is '<error>' when no response came back.",
    ["code", "method", "host"],
    registry=registry,
)
rest_client_request_duration_seconds = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds, one attempt, broken down by verb and host.",
    ["verb", "host"],
    buckets=_REST_BUCKETS,
    registry=registry,
)
rest_client_rate_limiter_duration_seconds = Histogram(
    "rest_client_rate_limiter_duration_seconds",
    "Client side rate limiter latency in seconds, broken down by verb and host.",
    ["verb", "host"],
    buckets=_REST_BUCKETS,
    registry=registry,
)
rest_client_request_retries_total = Counter(
    "rest_client_request_retries",
    "Number of request retries, partitioned by status code, verb, and host.",
    ["code", "verb", "host"],
    registry=registry,
)

# ---- reflectors and events -------------------------------------------------------------
reflector_lists_total = Counter(
    "reflector_lists",
    "Number of full lists (the first one and every relist) per reflector.",
    ["name"],
    registry=registry,
)
reflector_watch_errors_total = Counter(
    "reflector_watch_errors",
    "Number of list or watch attempts that ended in an error, per reflector and reason.",
    ["name", "reason"],
    registry=registry,
)
informer_handler_errors_total = Counter(
    "informer_handler_errors",
    "Number of exceptions raised by an informer's event handler (logged with the object, "
    "handed to the handler's on_error, and the event dropped), per informer and handler.",
    ["informer", "handler"],
    registry=registry,
)
events_dropped_total = Counter(
    "events_dropped",
    "Number of Events not written: the recorder's buffer was full (cause=buffer_full), the "
    "object had used up its spam-filter tokens (cause=spam), or every attempt failed.",
    ["component", "cause"],
    registry=registry,
)


gc_pause_seconds = Histogram(
    "python_gc_pause_seconds",
    "Duration of each pass of the cyclic garbage collector, by generation: every thread "
    "of the process stands still while it runs (runtime/gctune.py).",
    ["generation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
    registry=registry,
)


class _QueueGauges(Collector):
    """Computes depth / unfinished / longest-running gauges of live queues at scrape time."""

    def __init__(self) -> None:
        self._queues: weakref.WeakSet[WorkQueue] = weakref.WeakSet()
        self._lock = threading.Lock()

    def track(self, q: WorkQueue) -> None:
        with self._lock:
            self._queues.add(q)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("workqueue_depth", "Current depth of workqueue", labels=["name"])
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration. Large values indicate stuck threads.",
            labels=["name"],
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels=["name"],
        )
        with self._lock:
            queues = list(self._queues)
        now = time.monotonic()
        totals: dict[str, list[float]] = {}
        for q in queues:
            if not q.name:
                continue
            d, starts = q._metric_snapshot()
            t = totals.setdefault(q.name, [0.0, 0.0, 0.0])
            t[0] += d
            t[1] += sum(now - s for s in starts)
            t[2] = max(t[2], max((now - s for s in starts), default=0.0))
        for name, (d, u, lg) in totals.items():
            depth.add_metric([name], d)
            unfinished.add_metric([name], u)
            longest.add_metric([name], lg)
        yield depth
        yield unfinished
        yield longest

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(())


queue_gauges = _QueueGauges()
registry.register(queue_gauges)
