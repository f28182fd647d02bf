"""Scheduler: one strategy instance per name (roundRobin keeps a cursor), one RNG."""

from __future__ import annotations

import random
from collections.abc import Sequence

from api.v1alpha1.types import DeviceExposure, GPUWorkload, SchedulingStrategy
from internal.scheduling.framework import Decision, schedule
from internal.scheduling.ledger import Ledger
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors
from internal.scheduling.snapshot import Snapshot
from internal.scheduling.strategies import Strategy, create


class Scheduler:
    def __init__(
        self,
        snapshot: Snapshot,
        ledger: Ledger,
        *,
        rng: random.Random | None = None,
        default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
        floors: ShareFloors = DEFAULT_FLOORS,
    ) -> None:
        self.snapshot = snapshot
        self.ledger = ledger
        self.rng = rng if rng is not None else random.Random(0)
        self.default_exposure = default_exposure
        self.floors = floors  # the smallest share placed (sharefloor.py)
        self._strategies: dict[str, Strategy] = {}
        if snapshot.ledger is not ledger:
            snapshot.attach(ledger)

    def strategy(self, name: str | SchedulingStrategy) -> Strategy:
        key = name.value if isinstance(name, SchedulingStrategy) else name
        s = self._strategies.get(key)
        if s is None:
            s = self._strategies[key] = create(key)
        return s

    def schedule(self, workload: GPUWorkload, strategy: str | None = None, *,
                 across_namespaces: bool = True,
                 then: Sequence[GPUWorkload] = ()) -> Decision:
        """Decide for ``workload`` with ``strategy`` (default: its spec's). Pure.
        ``across_namespaces``: may it preempt workloads of other namespaces;
        ``then``: the gang's later parts, of other shapes (``gangparts.py``)."""
        strat = self.strategy(strategy or workload.spec.scheduling_strategy
                              or SchedulingStrategy.LEAST_LOADED)
        return schedule(
            workload,
            self.snapshot,
            self.ledger,
            strat,
            self.rng,
            default_exposure=self.default_exposure,
            across_namespaces=across_namespaces,
            floors=self.floors,
            then=then,
        )
