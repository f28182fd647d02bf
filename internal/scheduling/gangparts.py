"""A gang whose replicas are not all alike: several *parts*, each a GPUWorkload of its
own shape (GPUs per replica, nodeSelector, tolerations, what node fit reads), placed
one after the other in one search against one ``View``, so that no part takes what an
earlier one took, and all or nothing: a JobSet's launcher and its workers, a
LeaderWorkerSet's leader and its workers (docs/podgroups.md). Pure, as
``framework.schedule``, which hands a gang of parts here.

The replicas' indices run on across the parts (the first part's 0..n-1, the next
part's from n). Not planned for a gang of parts: a preemption (it waits for room and
says so) and an annotation map (a pod group never has one).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from internal.scheduling.filters import group_reasons
from internal.scheduling.ledger import Ledger, booking_owner
from internal.scheduling.outcome import SCHEDULED, UNSCHEDULABLE, Decision
from internal.scheduling.search import _explain, _exposure, _place_searched, _tolerations
from internal.scheduling.snapshot import Snapshot
from internal.scheduling.strategies.base import Strategy
from internal.scheduling.view import Context, View


def shape(parts: Sequence[GPUWorkload]) -> str:
    """``1 x 1 + 2 x 4 GPU(s)``: each part's replicas x GPUs per replica."""
    return " + ".join(f"{p.spec.replicas} x {p.spec.gpus}" for p in parts) + " GPU(s)"


def schedule_parts(parts: Sequence[GPUWorkload], snapshot: Snapshot, ledger: Ledger,
                   strat: Strategy, rng: random.Random, *,
                   default_exposure: DeviceExposure) -> Decision:
    """Where every replica of every part goes, booked under the first part's owner
    (each part must name the same), or why the first part that does not fit cannot:
    its per-node reasons are the ledger's alone, without the replicas of the parts
    before it, which the message counts."""
    view = View(ledger, booking_owner(parts[0]))
    placements: list[Placement] = []
    visited = 0
    for n, part in enumerate(parts):
        counted = _exposure(part, default_exposure) is DeviceExposure.DEVICE_PLUGIN
        ctx = Context(workload=part, gpus=part.spec.gpus, counted=counted, rng=rng,
                      tolerations=_tolerations(part), snapshot=snapshot, view=view,
                      spread=strat.most_free_first)
        got, _ = _place_searched(strat, ctx)
        visited += ctx.visited
        if got is None:
            reasons, extra = _explain(part, snapshot, ledger, counted, ctx.reasons)
            before = (f", after the {len(placements)} replica(s) of the part(s) before it"
                      if placements else "")
            message = (f"gang of {shape(parts)} does not fit, nothing booked: part {n + 1} "
                       f"({part.spec.replicas} x {part.spec.gpus} GPU(s){before}): "
                       + group_reasons(reasons, others=max(0, len(snapshot) - len(reasons)),
                                       need=part.spec.gpus))
            return Decision(UNSCHEDULABLE, strat.name, message=message, reasons=reasons,
                            counted=counted, gpus_per_replica=part.spec.gpus,
                            visited=visited + extra)
        placements += [p.model_copy(update={"index": len(placements) + i})
                       for i, p in enumerate(got)]
    strat.placed([p.node for p in placements])
    used = ", ".join(sorted({p.node for p in placements}))
    return Decision(SCHEDULED, strat.name, placements,
                    message=f"placed {len(placements)} replica(s) on {used}",
                    gpus_per_replica=parts[0].spec.gpus, visited=visited)
