"""What the state gauges read (``internal/metrics/domain.py``'s ``STATE``): the
workloads' phases and unmanaged reasons, the agents' heartbeats from the caches,
and the devices from the placement state when it is ready (nothing before: the
gauges never build a state)."""

from __future__ import annotations

from datetime import UTC, datetime

from controllers.informers import Informers
from controllers.placement.source import PlacementStateSource
from controllers.status.conditions import MANAGED, get_condition
from internal.metrics.domain import STATE, DeviceUse
from internal.scheduling.inventory import heartbeat


class StateMetrics:
    def __init__(self, informers: Informers, states: PlacementStateSource) -> None:
        self.informers, self.states = informers, states

    def register(self) -> None:
        STATE.set_sources(self.phases, self.node_gpus, self.heartbeats, self.unmanaged,
                          self.shares, self.devices)

    def phases(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for w in self.informers.workloads.indexer.list():
            phase = (w.get("status") or {}).get("phase") or "Pending"
            counts[phase] = counts.get(phase, 0) + 1
        return counts

    def unmanaged(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for w in self.informers.workloads.indexer.list():
            cond = get_condition(w.get("status") or {}, MANAGED) or {}
            if cond.get("status") == "False":
                reason = str(cond.get("reason") or "")
                counts[reason] = counts.get(reason, 0) + 1
        return counts

    def heartbeats(self) -> dict[str, float]:
        now = datetime.now(UTC)
        out = {}
        for g in self.informers.gpunodes.indexer.list():
            beat = heartbeat(g)
            if beat is not None:
                out[g["metadata"]["name"]] = max(0.0, (now - beat).total_seconds())
        return out

    def node_gpus(self) -> tuple[dict[str, int], dict[str, int]]:
        state = self.states.if_ready()
        return state.node_gpus() if state is not None else ({}, {})

    def shares(self) -> list[tuple[str, int, float, int | None]]:
        state = self.states.if_ready()
        return state.device_shares() if state is not None else []

    def devices(self) -> list[tuple[str, int, DeviceUse]]:
        state = self.states.if_ready()
        return state.device_use() if state is not None else []
