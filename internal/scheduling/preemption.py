"""Priority: who goes first, and which lower-priority bookings a workload may
preempt so that it fits."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from internal.scheduling.gangparts import attempt_gang
from internal.scheduling.ledger import Ledger
from internal.scheduling.snapshot import Snapshot
from internal.scheduling.strategies.base import Strategy

#: victims considered at most by the preemption planner
MAX_VICTIMS = 64


def order_by_priority(workloads: Iterable[GPUWorkload]) -> list[GPUWorkload]:
    """Higher priority first; then older first; then by key (deterministic)."""
    return sorted(
        workloads,
        key=lambda w: (-w.spec.priority, w.metadata.creation_timestamp or "", w.key),
    )


def booking_namespace(key: str) -> str:
    """The namespace of a booking key: ``ns/name`` (a workload) or ``Kind:ns/name``
    (a pod book's owner)."""
    return key.split(":", 1)[-1].split("/", 1)[0]


def plan_preemption(
    workload: GPUWorkload,
    snapshot: Snapshot,
    ledger: Ledger,
    strategy: Strategy,
    counted: bool,
    across_namespaces: bool = True,
    then: Sequence[GPUWorkload] = (),
    default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
) -> tuple[list[str] | None, list[Placement], int]:
    """Lowest-priority victims whose release lets the whole gang fit (with its later
    parts ``then``, ``gangparts.py``, each searched as its own shape).

    Only workloads of strictly lower priority are candidates (foreign pods never
    are), and, unless ``across_namespaces`` (a priority an admin controls), only
    those of the workload's own namespace: the namespace of its key, so a pod
    group's model (keyed ``Pod:<ns>/<name>``, controllers/podbinding/groups.py)
    is held to its members' namespace too. Victims are added lowest priority first
    until the gang fits, then any victim not needed is dropped again (highest
    priority first). Returns (victims or None, nominated placements, nodes visited).
    """
    prio = workload.spec.priority
    ns = booking_namespace(workload.key)
    candidates = sorted(
        (a for a in ledger.bookings() if a.key != workload.key and a.priority < prio
         and (across_namespaces or booking_namespace(a.key) == ns)),
        key=lambda a: (a.priority, a.key),
    )[:MAX_VICTIMS]
    owner_of = {a.key: a.owner for a in candidates}

    def attempt(released: list[str]) -> tuple[list[Placement] | None, int]:
        return attempt_gang(workload, then, snapshot, ledger, strategy, counted, released,
                            default_exposure=default_exposure)

    visited = 0
    chosen: list[str] = []
    placements: list[Placement] | None = None
    for a in candidates:
        chosen.append(a.key)
        placements, seen = attempt([owner_of[k] for k in chosen])
        visited += seen
        if placements is not None:
            break
    if placements is None:
        return None, [], visited
    for key in sorted(chosen, key=lambda k: (-ledger.priority_of(k), k)):
        trial = [k for k in chosen if k != key]
        if not trial:
            continue
        p, seen = attempt([owner_of[k] for k in trial])
        visited += seen
        if p is not None:
            chosen, placements = trial, p
    return chosen, placements, visited
