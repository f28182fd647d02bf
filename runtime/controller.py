"""The controller: a work queue of requests fed by watches, drained by N worker threads
that call the reconciler (port of controller-runtime's pkg/internal/controller).

Outcome of one reconcile, as in controller-runtime:

* raises :class:`TerminalError` -> logged, counted as an error, not requeued;
* raises anything else -> logged with the request, requeued rate-limited;
* ``Result(requeue_after=s)`` -> forgotten by the rate limiter, requeued after ``s``;
* ``Result(requeue=True)`` -> requeued rate-limited;
* ``None`` / ``Result()`` -> forgotten (success).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import structlog

from runtime import metrics
from runtime.errors import ApiError
from runtime.handler import EnqueueHandler, MapFunc, Request
from runtime.informer import HandlerRegistration, SharedIndexInformer
from runtime.predicates import Predicate
from runtime.ratelimiter import RateLimiter
from runtime.workqueue import WorkQueue

log = structlog.get_logger("runtime.controller")


@dataclass(frozen=True)
class Result:
    requeue: bool = False
    requeue_after: float = 0.0


class TerminalError(Exception):
    """A reconcile error that retrying cannot fix: not requeued (still counted)."""


class Reconciler(Protocol):
    def reconcile(self, request: Request) -> Result | None: ...


ReconcileFunc = Callable[[Request], "Result | None"]


class Controller:
    def __init__(
        self,
        name: str,
        reconciler: Reconciler | ReconcileFunc,
        max_concurrent_reconciles: int = 1,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self.name = name
        self._reconcile: ReconcileFunc = (
            reconciler.reconcile if hasattr(reconciler, "reconcile") else reconciler  # type: ignore[assignment]
        )
        self.max_concurrent_reconciles = max(1, max_concurrent_reconciles)
        self.queue = WorkQueue(name=name, rate_limiter=rate_limiter)
        self._workers: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._started = False
        self._lock = threading.Lock()
        self.registrations: list[HandlerRegistration] = []
        self._m_active = metrics.active_workers.labels(name)
        self._m_time = metrics.reconcile_time_seconds.labels(name)
        self._m_errors = metrics.reconcile_errors_total.labels(name)
        self._m_terminal = metrics.terminal_reconcile_errors_total.labels(name)
        self._m_total = {
            r: metrics.reconcile_total.labels(name, r)
            for r in ("success", "error", "requeue", "requeue_after")
        }
        metrics.max_concurrent_reconciles.labels(name).set(self.max_concurrent_reconciles)
        self._m_active.set(0)
        self.log = log.bind(controller=name)

    def watch(
        self,
        informer: SharedIndexInformer,
        map_func: MapFunc,
        predicates: Iterable[Predicate] = (),
    ) -> HandlerRegistration:
        """Enqueue the requests ``map_func`` returns for events that pass ``predicates``."""
        reg = informer.add_event_handler(EnqueueHandler(self.queue, map_func, predicates))
        self.registrations.append(reg)
        return reg

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
            self.log.info("controller.starting", workers=self.max_concurrent_reconciles)
            for i in range(self.max_concurrent_reconciles):
                t = threading.Thread(
                    target=self._worker, name=f"{self.name}-worker-{i}", daemon=True
                )
                t.start()
                self._workers.append(t)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop after the reconciles in flight (the backlog is abandoned). True if all stopped."""
        self._stopping.set()
        self.queue.shut_down()
        deadline = time.monotonic() + timeout
        for t in self._workers:
            t.join(max(0.0, deadline - time.monotonic()))
        ok = not any(t.is_alive() for t in self._workers)
        self.log.info("controller.stopped", clean=ok)
        return ok

    @property
    def started(self) -> bool:
        return self._started

    # ---------------------------------------------------------------- workers
    def _worker(self) -> None:
        while True:
            item, shutdown = self.queue.get()
            if shutdown:
                return
            if self._stopping.is_set():
                self.queue.done(item)
                return
            self._m_active.inc()
            try:
                self._reconcile_handler(item)
            finally:
                self._m_active.dec()
                self.queue.done(item)

    def _reconcile_handler(self, req: Request) -> None:
        start = time.monotonic()
        try:
            result = self._reconcile(req)
        except TerminalError as e:
            self._m_time.observe(time.monotonic() - start)
            self._m_terminal.inc()
            self._m_errors.inc()
            self._m_total["error"].inc()
            self.queue.forget(req)
            self.log.error(
                "controller.reconcile_terminal_error",
                request=str(req),
                namespace=req.namespace,
                name=req.name,
                error=str(e),
            )
            return
        except Exception as e:
            self._m_time.observe(time.monotonic() - start)
            self._m_errors.inc()
            self._m_total["error"].inc()
            self.queue.add_rate_limited(req)
            self.log.error(
                "controller.reconcile_error",
                request=str(req),
                namespace=req.namespace,
                name=req.name,
                error=str(e),
                error_type=type(e).__name__,
                requeues=self.queue.num_requeues(req),
                # the API server's answer says what went wrong; any other error is
                # a bug of the reconciler's, logged with where it was raised
                exc_info=not isinstance(e, ApiError),
            )
            return
        self._m_time.observe(time.monotonic() - start)
        if result is None:
            result = Result()
        if result.requeue_after > 0:
            self.queue.forget(req)
            self.queue.add_after(req, result.requeue_after)
            self._m_total["requeue_after"].inc()
        elif result.requeue:
            self.queue.add_rate_limited(req)
            self._m_total["requeue"].inc()
        else:
            self.queue.forget(req)
            self._m_total["success"].inc()

    def enqueue(self, req: Request) -> None:
        self.queue.add(req)
