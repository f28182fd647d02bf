"""Fluent controller construction (controller-runtime's pkg/builder)::

    Builder(mgr).for_("apps/v1", "Deployment", GenerationChangedPredicate()) \\
        .owns("v1", "Pod").complete(MyReconciler())
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.controller import Controller, ReconcileFunc, Reconciler
from runtime.handler import MapFunc, enqueue_object, enqueue_owner
from runtime.predicates import Predicate
from runtime.ratelimiter import RateLimiter

if TYPE_CHECKING:
    from runtime.manager import Manager


class Builder:
    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self._name: str | None = None
        self._for: tuple[str, str, tuple[Predicate, ...]] | None = None
        self._watches: list[tuple[str, str, MapFunc | None, tuple[Predicate, ...]]] = []
        self._filters: list[Predicate] = []
        self._max_concurrent = 1
        self._rate_limiter: RateLimiter | None = None

    def named(self, name: str) -> Builder:
        self._name = name
        return self

    def for_(self, api_version: str, kind: str, *predicates: Predicate) -> Builder:
        """The primary resource: its own events enqueue its own key."""
        self._for = (api_version, kind, predicates)
        return self

    def owns(self, api_version: str, kind: str, *predicates: Predicate) -> Builder:
        """Children: their events enqueue their controlling owner of the ``for_`` kind."""
        self._watches.append((api_version, kind, None, predicates))
        return self

    def watches(
        self, api_version: str, kind: str, map_func: MapFunc, *predicates: Predicate
    ) -> Builder:
        """Any resource: ``map_func(obj)`` returns the requests to enqueue."""
        self._watches.append((api_version, kind, map_func, predicates))
        return self

    def with_event_filter(self, predicate: Predicate) -> Builder:
        """A predicate applied to every watch of this controller."""
        self._filters.append(predicate)
        return self

    def with_options(
        self, max_concurrent_reconciles: int | None = None, rate_limiter: RateLimiter | None = None
    ) -> Builder:
        if max_concurrent_reconciles is not None:
            self._max_concurrent = max_concurrent_reconciles
        if rate_limiter is not None:
            self._rate_limiter = rate_limiter
        return self

    def complete(self, reconciler: Reconciler | ReconcileFunc) -> Controller:
        if self._for is None:
            raise ValueError("for_() is required")
        f_api, f_kind, f_preds = self._for
        name = self._name or f_kind.lower()
        ctrl = Controller(name, reconciler, self._max_concurrent, self._rate_limiter)
        mgr = self.manager
        ctrl.watch(mgr.informer_for(f_api, f_kind), enqueue_object, [*self._filters, *f_preds])
        for api, kind, fn, preds in self._watches:
            mapper = fn if fn is not None else enqueue_owner(f_api, f_kind, only_controller=True)
            ctrl.watch(mgr.informer_for(api, kind), mapper, [*self._filters, *preds])
        mgr.add(ctrl)
        return ctrl
