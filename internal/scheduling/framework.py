"""Filter -> score -> pick devices, for a whole workload (a gang is all-or-nothing).

``schedule(workload, snapshot, ledger, strategy, rng)`` is pure: it reads the
snapshot and the ledger and returns a Decision; it changes neither. The caller
books a successful decision with ``ledger.assume(workload.key, decision.placements,
...)`` (see ``Decision.assume``), writes status, then ``ledger.commit``.

Filters, in order (the first that fails gives the node's reason): node exists;
Ready; not cordoned; every NoSchedule/NoExecute taint tolerated by the template;
labels match spec.nodeSelector; the GPUNode's heartbeat not stale; enough free healthy
devices with at least minGPUMemoryMiB; an NVLink-connected set when topology is
Required.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement
from internal.scheduling import mapparser
from internal.scheduling.devicepicker import pick_devices
from internal.scheduling.ledger import Ledger, booking_owner
from internal.scheduling.snapshot import NodeInfo, Snapshot, tolerates, untolerated_taint
from internal.scheduling.strategies import base as registry
from internal.scheduling.strategies.base import Strategy

# Decision outcomes (also used as condition reasons by the controller)
SCHEDULED = "Scheduled"
UNSCHEDULABLE = "Unschedulable"
INVALID_MAP = "InvalidSchedulingMap"
PREEMPT = "Preempting"

#: a node whose GPU agent stopped reporting offers nothing (its placements stay)
STALE_REASON = "GPUNode heartbeat stale (GPU agent not reporting), GPUs not offered"
#: a ``deviceExposure: dra`` workload needs a node whose GPUs the DRA driver publishes
NO_SLICES_REASON = "no ResourceSlices of the DRA driver (deviceExposure dra)"

#: unschedulable messages name every node when at most this many were not filtered
EXPLAIN_ALL_BELOW = 16

#: the taint a cordoned node carries (kube-scheduler's TaintNodesByCondition)
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}

#: victims considered at most by the preemption planner
MAX_VICTIMS = 64


def gpus_word(n: int) -> str:
    return f"{n} free GPU" if n == 1 else f"{n} free GPUs"


def free_text(n: int, node: NodeInfo, view: View) -> str:
    """'3 free GPUs (1 unhealthy)': the free count, naming the devices that would be
    free but are not offered because they are unhealthy (held ones are not free)."""
    bad = sum(1 for d in node.unhealthy if not view.held_by_other(node.name, d))
    return gpus_word(n) + (f" ({bad} unhealthy)" if bad else "")


# ------------------------------------------------------------------------ view


class View:
    """The ledger as one decision of ``owner`` sees it: plus what this decision has
    taken so far (the gang's earlier replicas), minus everything the ``released``
    owners hold (planned victims: their bookings and their pods)."""

    def __init__(self, ledger: Ledger, owner: str, released: Iterable[str] = ()) -> None:
        self.ledger = ledger
        self.owner = owner
        self.released = frozenset(released)
        self.taken: dict[str, set[int]] = {}
        self.taken_count: dict[str, int] = {}
        self.last_node: str | None = None  # node of the latest take (gang order)
        # nodes where released owners hold something: their index entry is stale
        self.extra_nodes: list[str] = sorted(
            {n for a in ledger.allocations().values() if a.owner in self.released
             for n in a.nodes}
        ) if self.released else []

    def held_by_other(self, node: str, device: int) -> bool:
        """Is ``device`` held by an owner other than this decision's (and not released)?"""
        return any(o != self.owner and o not in self.released
                   for o in self.ledger.device_owners(node, device))

    def free_devices(self, node: str) -> set[int]:
        taken = self.taken.get(node, ())
        return {
            d
            for d in self.ledger.usable(node)
            if d not in taken and not self.held_by_other(node, d)
        }

    def counted_load(self, node: str) -> int:
        c = self.ledger.counted(node)
        return sum(v for o, v in c.items() if o != self.owner and o not in self.released) + (
            self.taken_count.get(node, 0)
        )

    def free_count(self, node: str) -> int:
        return max(0, len(self.free_devices(node)) - self.counted_load(node))

    def take(self, node: str, devices: Iterable[int], count: int = 0) -> None:
        self.taken.setdefault(node, set()).update(devices)
        self.last_node = node
        if count:
            self.taken_count[node] = self.taken_count.get(node, 0) + count

    def index_free(self, node: str) -> int:
        """The (possibly stale) free count of the ledger's index: a cheap bound."""
        if node in self.extra_nodes:
            return len(self.ledger.usable(node))
        return self.ledger.index.get(node)

    def index_candidates(self, min_free: int, *, most_free_first: bool = True) -> Iterator[str]:
        """Nodes released victims touch, then the index's nodes with >= min_free."""
        seen = set(self.extra_nodes)
        yield from self.extra_nodes
        for n in self.ledger.index.iter_nodes(min_free, most_free_first=most_free_first):
            if n not in seen:
                yield n


# --------------------------------------------------------------------- context


@dataclass
class Context:
    workload: GPUWorkload
    gpus: int
    counted: bool
    rng: random.Random
    tolerations: list[Mapping[str, Any]]
    snapshot: Snapshot
    view: View
    visited: int = 0
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.workload.key


@dataclass(frozen=True, slots=True)
class Candidate:
    node: NodeInfo
    devices: tuple[int, ...]
    free: int  # free GPUs on the node before this replica

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def free_after(self) -> int:
        return self.free - max(len(self.devices), 0)


@dataclass
class Decision:
    """Outcome of one scheduling attempt.

    - ``outcome == SCHEDULED``: ``placements`` has one entry per replica.
    - ``UNSCHEDULABLE``: nothing fits; ``message`` groups per-node ``reasons``.
    - ``INVALID_MAP``: the user's map is wrong; ``message`` names the line/problem.
    - ``PREEMPT``: evict ``victims`` (workload keys, lowest priority first); the
      workload then fits as in ``placements``, booked as a nomination over the
      victims' owners (``overlap``): their pods must be gone before it starts.
    """

    outcome: str
    strategy: str
    placements: list[Placement] = field(default_factory=list)
    message: str = ""
    reasons: dict[str, str] = field(default_factory=dict)
    victims: list[str] = field(default_factory=list)
    overlap: list[str] = field(default_factory=list)  # the victims' owners
    counted: bool = False
    gpus_per_replica: int = 0
    visited: int = 0  # nodes the filters ran on

    @property
    def ok(self) -> bool:
        return self.outcome == SCHEDULED

    @property
    def nodes(self) -> list[str]:
        return sorted({p.node for p in self.placements})

    @property
    def gpus_total(self) -> int:
        """GPUs the placements use (for status.gpus): the sum over replicas."""
        if self.counted:
            return self.gpus_per_replica * len(self.placements)
        return sum(len(p.devices) for p in self.placements)

    def assume(self, ledger: Ledger, workload: GPUWorkload) -> None:
        """Book this decision in ``ledger`` (raises LedgerConflict if stale). A
        preemption is booked once its victims' bookings are released: nominated
        over their pods, which still hold the devices until they are gone."""
        if self.outcome not in (SCHEDULED, PREEMPT):
            raise ValueError(f"cannot assume a {self.outcome} decision")
        ledger.assume(
            workload.key,
            self.placements,
            gpus_per_replica=self.gpus_per_replica,
            priority=workload.spec.priority,
            owner=booking_owner(workload),
            uid=workload.metadata.uid or "",
            overlap=self.overlap,
        )


# ---------------------------------------------------------------------- filters


def filter_node(
    name: str, ctx: Context, *, exact: tuple[int, ...] | None = None
) -> tuple[str | None, tuple[int, ...], int]:
    """Run the filters on one node. Returns (reason or None, devices, free count)."""
    ctx.visited += 1
    node = ctx.snapshot.get(name)
    if node is None:
        return "node not found", (), 0
    if not node.ready:
        return "NotReady", (), 0
    spec = ctx.workload.spec
    # Cordons and taints bind every strategy, a map's named nodes included, unless
    # the template tolerates them (as kube-scheduler does).
    if node.unschedulable and not tolerates(ctx.tolerations, CORDON_TAINT):
        return "unschedulable (cordoned)", (), 0
    taint = untolerated_taint(node, ctx.tolerations)
    if taint is not None:
        val = f"={taint.get('value')}" if taint.get("value") else ""
        return f"taint {taint.get('key')}{val}:{taint.get('effect')} not tolerated", (), 0
    if exact is None:
        for k, v in spec.node_selector.items():
            if node.labels.get(k) != v:
                return f"does not match nodeSelector {k}={v}", (), 0
    if node.stale:
        return STALE_REASON, (), 0
    if spec.device_exposure is DeviceExposure.DRA and not node.dra_driver:
        return NO_SLICES_REASON, (), 0
    view = ctx.view
    free_count = view.free_count(name)
    min_mem = spec.min_gpu_memory_mib

    def mem_ok(d: int) -> bool:
        info = node.devices.get(d)
        if info is None:
            return False
        if min_mem <= 0:
            return True
        return info.memory_total_mib is not None and info.memory_total_mib >= min_mem

    if exact is not None:
        return _filter_exact(node, ctx, exact, mem_ok)
    if ctx.counted:
        if free_count < ctx.gpus:
            return f"{free_text(free_count, node, view)}, needs {ctx.gpus}", (), free_count
        return None, (), free_count
    free = view.free_devices(name)
    eligible = sorted(d for d in free if mem_ok(d))
    available = min(len(eligible), free_count)
    if available < ctx.gpus:
        why = f"{free_text(available, node, view)}, needs {ctx.gpus}"
        low_mem = len(free) - len(eligible)
        if low_mem:
            unknown = any(
                node.devices[d].memory_total_mib is None for d in free if d in node.devices
            )
            why += (
                f" ({low_mem} with unknown memory, no GPUNode report)"
                if unknown
                else f" ({low_mem} below {min_mem} MiB)"
            )
        return why, (), free_count
    pick = pick_devices(
        eligible,
        ctx.gpus,
        topology=spec.topology,
        nvlink_peers={i: d.nvlink_peers for i, d in node.devices.items()},
        topology_known=node.topology_known,
    )
    if pick.devices is None:
        return pick.reason, (), free_count
    return None, pick.devices, free_count


def _filter_exact(
    node: NodeInfo, ctx: Context, exact: tuple[int, ...], mem_ok: Any
) -> tuple[str | None, tuple[int, ...], int]:
    name = node.name
    problems: list[str] = []
    for d in exact:
        if d not in node.devices:
            problems.append(f"device {d} does not exist ({len(node.devices)} GPUs)")
        elif not node.devices[d].healthy:
            problems.append(f"device {d} unhealthy")
        elif ctx.view.held_by_other(name, d):
            problems.append(f"device {d} held by {ctx.view.ledger.holder(name, d)}")
        elif not mem_ok(d):
            problems.append(f"device {d} below {ctx.workload.spec.min_gpu_memory_mib} MiB")
    if problems:
        return "; ".join(problems), (), 0
    # unnamed (counted) holdings on the node must still leave room for what we name
    new = [d for d in exact if d not in ctx.view.taken.get(name, ())]
    free_count = ctx.view.free_count(name)
    if new and free_count < len(new):
        return f"{gpus_word(free_count)}, needs {len(new)} (other GPU pods)", (), free_count
    return None, exact, free_count


# ---------------------------------------------------------------------- messages


def group_reasons(
    reasons: Mapping[str, str], *, others: int = 0, need: int = 0, max_names: int = 3
) -> str:
    """'node1: 1 free GPU, needs 2; node2, node3: NotReady; 4990 other nodes: ...'"""
    by_reason: dict[str, list[str]] = {}
    for node in sorted(reasons):
        by_reason.setdefault(reasons[node], []).append(node)
    parts = []
    for reason, nodes in sorted(by_reason.items(), key=lambda kv: kv[1][0]):
        shown = ", ".join(nodes[:max_names])
        if len(nodes) > max_names:
            shown += f" and {len(nodes) - max_names} more"
        parts.append(f"{shown}: {reason}")
    if others:
        word = "node" if others == 1 else "nodes"
        parts.append(f"{others} other {word}: fewer than {gpus_word(need)}")
    return "; ".join(parts) if parts else "no nodes"


# ----------------------------------------------------------------------- schedule


def _resolve_strategy(workload: GPUWorkload, strategy: Strategy | str | None) -> Strategy:
    if isinstance(strategy, Strategy):
        return strategy
    return registry.create(strategy or workload.spec.scheduling_strategy.value)


def _exposure(workload: GPUWorkload, default: DeviceExposure) -> DeviceExposure:
    return workload.spec.device_exposure or default


def _tolerations(workload: GPUWorkload) -> list[Mapping[str, Any]]:
    tmpl = workload.spec.template or {}
    return list(((tmpl.get("spec") or {}).get("tolerations")) or [])


def _place_searched(strategy: Strategy, ctx: Context) -> tuple[list[Placement] | None, str]:
    placements: list[Placement] = []
    replicas = ctx.workload.spec.replicas
    for index in range(replicas):
        feasible: list[Candidate] = []
        limit = strategy.limit + len(ctx.view.extra_nodes)
        for name in strategy.candidates(ctx, ctx.view, ctx.snapshot):
            reason, devices, free = filter_node(name, ctx)
            if reason is not None:
                ctx.reasons[name] = reason
                continue
            node = ctx.snapshot.get(name)
            assert node is not None
            feasible.append(Candidate(node, devices, free))
            if len(feasible) >= limit:
                break
        if not feasible:
            return None, ""
        chosen = strategy.choose(feasible, ctx)
        ctx.reasons.pop(chosen.name, None)
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
    # report 0, 2, 3 (device 1 gone); a missing index is the filter's own reason
    sizes = {n: (max(info.devices) + 1 if info.devices else 0)
             for n, info in ctx.snapshot.nodes.items()}
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
        if reason is None:
            fit = free // max(ctx.gpus, 1)
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
    )
    if strat.uses_map:
        placements, outcome, msg = _place_mapped(ctx)
        return placements, ctx, outcome, msg
    placements, head = _place_searched(strat, ctx)
    return placements, ctx, (SCHEDULED if placements is not None else UNSCHEDULABLE), head


def schedule(
    workload: GPUWorkload,
    snapshot: Snapshot,
    ledger: Ledger,
    strategy: Strategy | str | None = None,
    rng: random.Random | None = None,
    *,
    default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
) -> Decision:
    """Decide where every replica of ``workload`` goes. Changes neither the snapshot
    nor the ledger (only roundRobin's cursor moves on success).

    ``strategy``: an instance (keeps state such as roundRobin's cursor), a name,
    or None for the workload's spec.schedulingStrategy. ``rng``: the random source
    of the random strategy (seeded for reproducible decisions).
    """
    if snapshot.ledger is not ledger:
        snapshot.attach(ledger)
    strat = _resolve_strategy(workload, strategy)
    rng = rng if rng is not None else random.Random(0)
    counted = (
        _exposure(workload, default_exposure) is DeviceExposure.DEVICE_PLUGIN and not strat.uses_map
    )
    gpus = workload.spec.gpus
    placements, ctx, outcome, msg = _attempt(workload, snapshot, ledger, strat, rng, counted)
    if placements is not None:
        strat.placed([p.node for p in placements])
        used = ", ".join(sorted({p.node for p in placements}))
        return Decision(
            SCHEDULED,
            strat.name,
            placements,
            message=f"placed {len(placements)} replica(s) on {used}",
            counted=counted,
            gpus_per_replica=gpus,
            visited=ctx.visited,
        )
    if outcome == INVALID_MAP:
        return Decision(INVALID_MAP, strat.name, message=msg, visited=ctx.visited)
    reasons = dict(ctx.reasons)
    visited = ctx.visited
    if not strat.uses_map:
        reasons, extra = _explain(workload, snapshot, ledger, counted, ctx.reasons)
        visited += extra
    # nodes never filtered were left out by the free-capacity index
    others = 0 if strat.uses_map else max(0, len(snapshot) - len(reasons))
    message = msg + group_reasons(reasons, others=others, need=gpus)
    if workload.spec.replicas > 1 and not strat.uses_map:
        message = (
            f"gang of {workload.spec.replicas} x {gpus} GPU(s) does not fit, "
            f"nothing booked: {message}"
        )
    elif workload.spec.replicas > 1:
        message = f"gang of {workload.spec.replicas} not placed, nothing booked: {message}"
    decision = Decision(
        UNSCHEDULABLE,
        strat.name,
        message=message,
        reasons=reasons,
        counted=counted,
        gpus_per_replica=gpus,
        visited=visited,
    )
    if strat.preempts:
        plan = plan_preemption(workload, snapshot, ledger, strat, counted)
        decision.visited += plan[2]
        if plan[0] is not None:
            victims, nominated = plan[0], plan[1]
            decision.outcome = PREEMPT
            decision.victims = victims
            decision.overlap = sorted({a.owner for v in victims
                                       if (a := ledger.allocation(v)) is not None})
            decision.placements = nominated
            decision.message = (
                f"preempting lower-priority {', '.join(victims)} to place; was: {message}"
            )
    return decision


# --------------------------------------------------------------------- priority


def order_by_priority(workloads: Iterable[GPUWorkload]) -> list[GPUWorkload]:
    """Higher priority first; then older first; then by key (deterministic)."""
    return sorted(
        workloads,
        key=lambda w: (-w.spec.priority, w.metadata.creation_timestamp or "", w.key),
    )


def plan_preemption(
    workload: GPUWorkload,
    snapshot: Snapshot,
    ledger: Ledger,
    strategy: Strategy,
    counted: bool,
) -> tuple[list[str] | None, list[Placement], int]:
    """Lowest-priority victims whose release lets the whole gang fit.

    Only workloads of strictly lower priority are candidates (foreign pods never
    are). Victims are added lowest priority first until the gang fits, then any
    victim not needed is dropped again (highest priority first). Returns
    (victims or None, nominated placements, nodes visited).
    """
    prio = workload.spec.priority
    candidates = sorted(
        (a for a in ledger.bookings() if a.key != workload.key and a.priority < prio),
        key=lambda a: (a.priority, a.key),
    )[:MAX_VICTIMS]
    owner_of = {a.key: a.owner for a in candidates}
    visited = 0
    chosen: list[str] = []
    placements: list[Placement] | None = None
    for a in candidates:
        chosen.append(a.key)
        placements, ctx, _, _ = _attempt(
            workload, snapshot, ledger, strategy, random.Random(0), counted,
            [owner_of[k] for k in chosen]
        )
        visited += ctx.visited
        if placements is not None:
            break
    if placements is None:
        return None, [], visited
    for key in sorted(chosen, key=lambda k: (-ledger.priority_of(k), k)):
        trial = [k for k in chosen if k != key]
        if not trial:
            continue
        p, ctx, _, _ = _attempt(
            workload, snapshot, ledger, strategy, random.Random(0), counted,
            [owner_of[k] for k in trial]
        )
        visited += ctx.visited
        if p is not None:
            chosen, placements = trial, p
    return chosen, placements, visited
