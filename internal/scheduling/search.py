"""One search for a whole workload against the ledger as a ``View`` sees it: the
strategy's candidates through the filters, replica by replica (a gang is
all-or-nothing), or the annotation map's named nodes; and the per-node reasons
when nothing fits."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement, SchedulingStrategy
from internal.scheduling import mapparser
from internal.scheduling.filters import filter_node, gpus_word, pick_on
from internal.scheduling.ledger import Ledger, booking_owner
from internal.scheduling.outcome import INVALID_MAP, SCHEDULED, UNSCHEDULABLE
from internal.scheduling.sharefilter import wanted
from internal.scheduling.snapshot import Snapshot
from internal.scheduling.strategies import base as registry
from internal.scheduling.strategies.base import Strategy
from internal.scheduling.view import Candidate, Context, View

#: unschedulable messages name every node when at most this many were not filtered
EXPLAIN_ALL_BELOW = 16


def _resolve_strategy(workload: GPUWorkload, strategy: Strategy | str | None) -> Strategy:
    if isinstance(strategy, Strategy):
        return strategy
    return registry.create(strategy or (workload.spec.scheduling_strategy
                                       or SchedulingStrategy.LEAST_LOADED).value)


def _exposure(workload: GPUWorkload, default: DeviceExposure) -> DeviceExposure:
    return workload.spec.device_exposure or default


def _tolerations(workload: GPUWorkload) -> list[Mapping[str, Any]]:
    tmpl = workload.spec.template or {}
    return list(((tmpl.get("spec") or {}).get("tolerations")) or [])


def check_exact(workload: GPUWorkload, snapshot: Snapshot, ledger: Ledger, owner: str,
                node: str, devices: tuple[int, ...]) -> str | None:
    """Why one replica of ``workload``, booked under ``owner``, cannot have exactly
    ``devices`` of ``node`` (None: it can): the exact-map filters of a mapped
    workload (``filter_node`` with ``exact``), for a caller that places one replica
    at a time (the seed path's pods)."""
    ctx = Context(workload=workload, gpus=len(devices), counted=False,
                  rng=random.Random(0), tolerations=_tolerations(workload),
                  snapshot=snapshot, view=View(ledger, owner))
    reason, _, _ = filter_node(node, ctx, exact=devices)
    return reason


def _bounded(strategy: Strategy, ctx: Context, portions: bool) -> bool:
    """May this search stop before ``limit`` feasible nodes (``Strategy.ceiling``)?

    Only where the nodes come most free first from the free-capacity index, and the
    index's free count of a node bounds what this decision may take there: no owner
    of the decision holds anything (the index counts its holdings as taken, the
    decision does not; a gang's earlier replicas only take more) and no victim is
    released (their nodes come first, out of order). The choice is the base's (the
    first of the best scores). A gang that fails does so on a replica that found no
    node, having filtered every candidate: its reasons and message are those of the
    search that gathers ``limit``."""
    cls = type(strategy)
    return (not portions and strategy.most_free_first
            and cls.ceiling is not Strategy.ceiling and cls.choose is Strategy.choose
            and cls.candidates is Strategy.candidates and not ctx.view.released
            and not ctx.view.ledger.holds_any(ctx.view.mine))


def _place_searched(strategy: Strategy, ctx: Context) -> tuple[list[Placement] | None, str]:
    placements: list[Placement] = []
    replicas = ctx.workload.spec.replicas
    portions = wanted(ctx.workload.spec) is not None
    bounded = _bounded(strategy, ctx, portions)
    for index in range(replicas):
        feasible: list[Candidate] = []
        limit = strategy.limit + len(ctx.view.extra_nodes)
        # a share or MIG instance may fit where no whole GPU is free: every node
        names = ctx.snapshot.names if portions else strategy.candidates(
            ctx, ctx.view, ctx.snapshot)
        # a strategy that scores no devices has them picked on the chosen node only
        pick = strategy.reads_devices
        best: Candidate | None = None  # bounded: the first of the best so far
        best_score: tuple[float, ...] = ()
        for name in names:
            if best is not None:
                ceiling = strategy.ceiling(ctx.view.index_free(name), ctx)
                if ceiling is not None and best_score >= ceiling:
                    break  # this node and every one after it could at best tie
            reason, devices, free = filter_node(name, ctx, pick=pick)
            if reason is not None:
                ctx.reasons[name] = reason
                continue
            node = ctx.snapshot.get(name)
            assert node is not None
            cand = Candidate(node, devices, free) if devices is not None else \
                Candidate(node, (), free, deferred=ctx.gpus)
            feasible.append(cand)
            if bounded:
                score = strategy.score(cand, ctx)
                if best is None or score > best_score:
                    best, best_score = cand, score
            if len(feasible) >= limit:
                break
        if not feasible:
            return None, ""
        chosen = best if best is not None else strategy.choose(feasible, ctx)
        if chosen.deferred is not None:
            chosen = Candidate(chosen.node, pick_on(chosen.node, ctx), chosen.free)
        ctx.reasons.pop(chosen.name, None)
        if portions:
            portion = ctx.portions[chosen.name]
            ctx.view.taken_portions.setdefault((chosen.name, chosen.devices[0]), []).append(
                portion)
            ctx.view.took_replica(chosen.name)
            placements.append(Placement(index=index, node=chosen.name,
                                        devices=list(chosen.devices),
                                        share=portion.text() or None, mig=portion.mig or None))
            continue
        if ctx.counted:
            ctx.view.take(chosen.name, (), ctx.gpus)
        else:
            ctx.view.take(chosen.name, chosen.devices)
        placements.append(Placement(index=index, node=chosen.name, devices=list(chosen.devices)))
    return placements, ""


def _place_mapped(ctx: Context) -> tuple[list[Placement] | None, str, str]:
    """(placements | None, outcome if failed, message)."""
    w = ctx.workload
    text = w.scheduling_map_text()
    if text is None:
        return (
            None,
            INVALID_MAP,
            (
                "schedulingStrategy annotationMap needs spec.schedulingMap or the "
                "gpu-scheduling-map annotation"
            ),
        )
    try:
        entries = mapparser.parse_scheduling_map(text)
    except mapparser.MapParseError as e:
        return None, INVALID_MAP, f"invalid scheduling map: {e}"
    # a node's size for the map check is its highest device index + 1: a GPUNode may
    # report 0, 2, 3 (device 1 gone); a missing index is the filter's own reason.
    # Only the nodes the map names: a decision walks no other node's devices.
    named = (ctx.snapshot.get(n) for n in {e.node for e in entries.values()})
    sizes = {info.name: (max(info.devices) + 1 if info.devices else 0)
             for info in named if info is not None}
    problems = mapparser.check_map_against(entries, w.spec.replicas, sizes)
    if problems:
        return None, INVALID_MAP, "invalid scheduling map: " + "; ".join(problems)
    placements = []
    for e in entries.values():
        reason, devices, _ = filter_node(e.node, ctx, exact=e.devices)
        if reason is not None:
            why = f"replica {e.index}: {reason}"
            prev = ctx.reasons.get(e.node)
            ctx.reasons[e.node] = why if prev is None else f"{prev}, {why}"
            continue
        ctx.view.take(e.node, devices)
        placements.append(Placement(index=e.index, node=e.node, devices=list(devices)))
    if ctx.reasons:
        return None, UNSCHEDULABLE, ""
    return placements, SCHEDULED, ""


def _explain(
    workload: GPUWorkload,
    snapshot: Snapshot,
    ledger: Ledger,
    counted: bool,
    seen: Mapping[str, str],
) -> tuple[dict[str, str], int]:
    """Per-node reasons against the ledger alone (without the failed gang's own
    tentative replicas), for the nodes already filtered plus, in small clusters,
    the nodes the index skipped. Returns (reasons, nodes filtered)."""
    names = set(seen)
    if len(snapshot) - len(names) <= EXPLAIN_ALL_BELOW:
        names.update(snapshot.names)
    ctx = Context(
        workload=workload,
        gpus=workload.spec.gpus,
        counted=counted,
        rng=random.Random(0),
        tolerations=_tolerations(workload),
        snapshot=snapshot,
        view=View(ledger, booking_owner(workload)),
    )
    replicas = workload.spec.replicas
    out: dict[str, str] = {}
    for name in sorted(names):
        reason, _, free = filter_node(name, ctx)
        if reason is None and wanted(workload.spec) is not None:
            reason = f"room for one replica, not {replicas}"
        elif reason is None:
            fit = free // max(ctx.gpus, 1)
            info = snapshot.get(name)
            room = snapshot.usage.room(name, info.allocatable, ctx.fit, ledger,
                                       ctx.view.released) \
                if info is not None else None
            if room is not None and room[0] < fit:  # node fit bounds it, not the GPUs
                reason = f"{room[1]}, room for {room[0]} of {replicas} replicas"
            else:
                reason = f"{gpus_word(free)}, room for {fit} of {replicas} replicas"
        out[name] = reason
    return out, ctx.visited


def _attempt(
    workload: GPUWorkload,
    snapshot: Snapshot,
    ledger: Ledger,
    strat: Strategy,
    rng: random.Random,
    counted: bool,
    released: Iterable[str] = (),
) -> tuple[list[Placement] | None, Context, str, str]:
    view = View(ledger, booking_owner(workload), released)
    ctx = Context(
        workload=workload,
        gpus=workload.spec.gpus,
        counted=counted,
        rng=rng,
        tolerations=_tolerations(workload),
        snapshot=snapshot,
        view=view,
        spread=strat.most_free_first,
    )
    if strat.uses_map:
        placements, outcome, msg = _place_mapped(ctx)
        return placements, ctx, outcome, msg
    placements, head = _place_searched(strat, ctx)
    return placements, ctx, (SCHEDULED if placements is not None else UNSCHEDULABLE), head
