"""The GPU picture of a cluster, computed from raw API objects (pure, no I/O):
which device of which node is free or held by whom, and the totals.

One inventory, one truth: the plugin does not count holders itself. Capacity and
holders are the controller's own ledger, rebuilt from the same objects by the same
code (``internal.cli.holders``): devices, health and staleness from the snapshot
(the GPUNode's ``status.devices`` while its agent reports, else ``0..n-1`` from
``nvidia.com/gpu`` allocatable; a stale GPUNode offers nothing; ResourceSlices when
the DRA driver publishes them), holders from pods, our Jobs, committed placements,
allocated ResourceClaims and the seed path's pods. So:

- a device is *free* exactly when the controller would offer it: healthy, on a node
  whose agent is not stale, and held by nobody; an unhealthy or stale device is
  never free, held or not;
- GPUs held without a device index are *counted*, not named: device-plugin
  placements, other pods' ``nvidia.com/gpu`` requests, and a pod whose devices
  annotation cannot be read (the controller then counts its request, not the
  devices it seems to name); the node's free count is the ledger's ``free_count``;
- every allocated claim of the driver holds its devices (ours show as their
  workload's replicas);
- what the controller cannot book or read is listed as a problem, in its words, and
  so is a node it refuses for reporting more GPUs than a node may have
  (``internal/scheduling/bounds.py``; the plugin judges with the default bound);
- a caller who reads one namespace's holders only (``holders_from``: a tenant) is
  never told a device is free: nothing cluster-scoped says which devices other
  namespaces hold (GPUNodes, Nodes and ResourceSlices carry no holder), so a device
  none of the read holders holds is *unknown*, a node's free count an upper bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION
from internal.cli.holders import Holdings, controller_holdings
from internal.scheduling import authority
from internal.scheduling.inventory import DEFAULT_STALE_AFTER
from internal.scheduling.resourceslices import DEFAULT_DRIVER
from internal.scheduling.shares import describe
from internal.scheduling.snapshot import NodeInfo, gpunode_name

__all__ = ["DEVICES_ANNOTATION", "Device", "NodeGPUs", "Totals", "node_gpus", "totals"]


FINISHED_PHASES = ("Succeeded", "Failed")

#: Device.health values
HEALTHY, UNHEALTHY, STALE, UNKNOWN = "Healthy", "Unhealthy", "Stale", "Unknown"


@dataclass
class Device:
    index: int
    #: who holds it: "ns/workload[replica]", "ns/pod/name", "ns/claim/name", ...;
    #: two names joined by ", " are a conflict the controller reports, except on a
    #: shared or MIG-enabled device (``sharing`` says how it is held)
    holder: str | None = None
    #: Healthy; Unhealthy (reported by the agent); Stale (the agent stopped
    #: reporting); Unknown (no GPUNode: from allocatable, offered as healthy; or a
    #: device a holder names that the node does not have)
    health: str = UNKNOWN
    #: the controller offers this device to new placements (healthy, agent not stale)
    offered: bool = False
    model: str = ""
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    utilization: int | None = None
    #: "3 shares, 60Gi of 80Gi" or "MIG: 3 of 7 instances held" (None: whole)
    sharing: str | None = None
    #: held by nobody by name on a node where GPUs are held without an index (the
    #: device plugin's): one of those may be this one, so it is never shown free
    maybe_counted: bool = False
    #: ... and the counted GPUs are as many as such devices or more: it is held
    counted_for_sure: bool = False
    #: held by none of the holders read, which are one namespace's only: another
    #: namespace may hold it, so it is never shown free
    unknown: bool = False

    @property
    def held(self) -> bool:
        return self.holder is not None

    @property
    def free(self) -> bool:
        """The controller would offer it now: not held, healthy, agent reporting, on a
        node without counted GPUs (which may be this device), and every namespace's
        holders read (else another namespace may hold it)."""
        return (self.holder is None and self.offered and not self.maybe_counted
                and not self.unknown)


@dataclass
class NodeGPUs:
    name: str
    source: str  # "GPUNode", "ResourceSlice" or "allocatable"
    devices: list[Device] = field(default_factory=list)
    counted: dict[str, int] = field(default_factory=dict)  # holder -> GPUs, no index
    heartbeat: str | None = None
    #: Ready, NotReady or cordoned: the node's state as the controller's filters see it
    state: str = "Ready"
    #: GPUs the controller would offer: the ledger's ``free_count`` (offered devices
    #: nobody holds, less the GPUs held without an index)
    free: int = 0
    #: who decides which device a holder gets (``internal/scheduling/authority.py``):
    #: the node's label (named, counted, dra), else ``named (held)`` / ``counted
    #: (held)`` from what holds there, ``mixed`` where both do, ``-`` for nothing yet
    authority: str = "-"
    #: the holders read are one namespace's only: ``free`` is an upper bound and
    #: ``allocated`` a lower one (another namespace may hold more)
    partial: bool = False

    @property
    def total(self) -> int:
        return len(self.devices)

    @property
    def allocated(self) -> int:
        """GPUs held: by name, plus counted. Above ``total`` the node is
        over-committed (two authorities handed one GPU out twice)."""
        named = sum(1 for d in self.devices if d.held)
        return named + sum(self.counted.values())

    @property
    def overcommitted(self) -> bool:
        return self.allocated > self.total

    @property
    def allocated_text(self) -> str:
        """``4``, or ``6 of 4`` on an over-committed node."""
        return f"{self.allocated} of {self.total}" if self.overcommitted else str(self.allocated)

    @property
    def unhealthy(self) -> int:
        return sum(1 for d in self.devices if d.health == UNHEALTHY)

    @property
    def stale(self) -> int:
        return sum(1 for d in self.devices if d.health == STALE)

    def free_dict(self) -> dict[str, int | None]:
        """``{"free": n}``, or ``{"free": None, "freeAtMost": n}`` when ``partial``."""
        return {"free": None, "freeAtMost": self.free} if self.partial else {"free": self.free}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "source": self.source, "state": self.state,
            "total": self.total, "allocated": self.allocated, **self.free_dict(),
            "overcommitted": self.overcommitted, "authority": self.authority,
            "unhealthy": self.unhealthy, "stale": self.stale,
            "lastHeartbeatTime": self.heartbeat,
            "devices": [
                {k: v for k, v in asdict(d).items() if v is not None
                 and (k != "unknown" or v)} | {"free": d.free}
                for d in self.devices
            ],
            "counted": dict(self.counted),
        }


def gpus_per_replica(w: Mapping[str, Any]) -> int:
    spec = w.get("spec") or {}
    try:
        return int(spec.get("gpusPerReplica") or spec.get("gpuCount") or 1)
    except (TypeError, ValueError):
        return 1


def workload_phase(w: Mapping[str, Any]) -> str:
    return (w.get("status") or {}).get("phase") or "Pending"


@dataclass
class Picture:
    """Every node's GPUs and the problems the controller finds in the objects."""

    nodes: list[NodeGPUs]
    problems: list[str]
    #: the one namespace whose holders the caller could read (None: every namespace)
    holders_from: str | None = None


def picture(nodes: Iterable[Mapping[str, Any]], gpunodes: Iterable[Mapping[str, Any]],
            workloads: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
            *, now: datetime | None = None,
            stale_after: timedelta | float = DEFAULT_STALE_AFTER,
            jobs: Iterable[Mapping[str, Any]] = (),
            slices: Iterable[Mapping[str, Any]] = (),
            claims: Iterable[Mapping[str, Any]] = (),
            driver: str = DEFAULT_DRIVER, holders_from: str | None = None) -> Picture:
    """One :class:`NodeGPUs` per node that has GPUs (or a GPUNode, or slices of the DRA
    ``driver``), by name, judged at ``now`` (default: the current time) with the
    controller's stale threshold, holders as the controller's ledger has them.
    ``holders_from``: the pods, workloads, Jobs and claims given are this namespace's
    only; a device none of them holds is then ``unknown``, never free."""
    gpunodes = list(gpunodes)
    heartbeats = {gpunode_name(g): (g.get("status") or {}).get("lastHeartbeatTime")
                  for g in gpunodes}
    reporting = {gpunode_name(g) for g in gpunodes if (g.get("status") or {}).get("devices")}
    h = controller_holdings(nodes, gpunodes, list(workloads), pods,
                            now=now or datetime.now(UTC), stale_after=stale_after, jobs=jobs,
                            slices=slices, claims=claims, driver=driver)
    out: list[NodeGPUs] = []
    for name in h.snapshot.names:
        info = h.snapshot.nodes[name]
        if not (info.devices or info.has_gpunode):
            continue
        ng = _from_snapshot(info, heartbeats.get(name), name in reporting, h)
        if holders_from is not None:
            _unseen_holders(ng)
        if h.published.has(name):
            ng.source = "ResourceSlice"
        out.append(ng)
    refused = [f"node {n}: {why} ({source})"
               for n, (why, source) in sorted(h.snapshot.refused.items())]
    return Picture(out, list(h.problems) + refused, holders_from)


def node_gpus(*args: Any, **kw: Any) -> list[NodeGPUs]:
    """:func:`picture`'s nodes."""
    return picture(*args, **kw).nodes


def _from_snapshot(info: NodeInfo, heartbeat: str | None, reported: bool,
                   h: Holdings) -> NodeGPUs:
    """``reported``: the devices come from the node's GPUNode (else allocatable)."""
    devs = []
    for i in sorted(info.devices):
        d = info.devices[i]
        if info.stale:
            health = STALE
        elif not d.healthy:
            health = UNHEALTHY
        else:
            health = HEALTHY if info.has_gpunode else UNKNOWN
        devs.append(Device(
            index=i, health=health, offered=i in info.usable, model=d.model,
            memory_total_mib=d.memory_total_mib,
            memory_used_mib=d.memory_used_mib if reported else None,
            utilization=d.utilization if reported else None,
        ))
    # a device a holder names that the node does not have is shown too
    known = {d.index for d in devs}
    devs += [Device(i) for i in sorted(set(h.ledger.holders(info.name)) - known)]
    devs.sort(key=lambda d: d.index)
    for d in devs:
        names = h.device_holders(info.name, d.index)
        d.holder = ", ".join(names) if names else None
        mig = h.ledger.sharing(info.name).mig.get(d.index)
        d.sharing = describe(h.ledger.device_holds(info.name, d.index), d.memory_total_mib,
                             None if mig is None else len(mig))
    counted = h.counted(info.name)
    unnamed = [d for d in devs if d.holder is None and d.offered]
    for d in unnamed:
        d.maybe_counted = bool(counted)
        d.counted_for_sure = sum(counted.values()) >= len(unnamed)
    source = "GPUNode" if reported else "allocatable"
    state = "NotReady" if not info.ready else ("cordoned" if info.unschedulable else "Ready")
    return NodeGPUs(info.name, source, devs, counted, heartbeat=heartbeat,
                    state=state, free=h.ledger.free_count(info.name),
                    authority=_authority(info, h))


def _unseen_holders(ng: NodeGPUs) -> None:
    """Holders of other namespaces were not read: a device the controller would offer
    and none of the read holders holds may be theirs."""
    ng.partial = True
    for d in ng.devices:
        d.unknown = d.holder is None and d.offered


def _authority(info: NodeInfo, h: Holdings) -> str:
    named = h.ledger.named_holder(info.name) is not None
    by_count = h.ledger.counted_holder(info.name) is not None
    label = authority.declared(info.labels)
    if label:
        return label
    if named and by_count:
        return "mixed"
    found = authority.effective(info.labels, named, by_count)
    return f"{found} (held)" if found else "-"


@dataclass
class Totals:
    nodes: int
    total: int
    allocated: int
    free: int
    unhealthy: int
    stale: int
    workloads: dict[str, int]  # phase -> count
    #: some node's holders were read in part: ``free`` is an upper bound
    partial: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def totals(view: list[NodeGPUs], workloads: Iterable[Mapping[str, Any]]) -> Totals:
    phases: dict[str, int] = {}
    for w in workloads:
        ph = workload_phase(w)
        phases[ph] = phases.get(ph, 0) + 1
    return Totals(
        nodes=len(view),
        total=sum(n.total for n in view),
        allocated=sum(n.allocated for n in view),
        free=sum(n.free for n in view),
        unhealthy=sum(n.unhealthy for n in view),
        stale=sum(n.stale for n in view),
        workloads=dict(sorted(phases.items())),
        partial=any(n.partial for n in view),
    )


def condition(w: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in (w.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return c
    return None


def pending_reason(w: Mapping[str, Any]) -> str:
    """Why a workload waits: the message of its ``Scheduled=False`` condition (reason
    Unschedulable, one line per node), or of an ``Unschedulable=True`` condition,
    else status.message."""
    for type_, status in (("Scheduled", "False"), ("Unschedulable", "True")):
        c = condition(w, type_)
        if c is not None and c.get("status") == status and (c.get("message") or
                                                              c.get("reason")):
            return c.get("message") or c.get("reason") or ""
    st = w.get("status") or {}
    return st.get("message") or ("not yet seen by the controller" if not st else "")


def placements_text(w: Mapping[str, Any]) -> str:
    """``0=node1:0,1 1=node2:3`` (the schedulingMap notation), or ``-``."""
    ps = sorted((w.get("status") or {}).get("placements") or (),
                key=lambda p: int(p.get("index", 0)))
    if not ps:
        return "-"
    return " ".join(
        f"{p.get('index', 0)}={p['node']}"
        + (":" + ",".join(str(d) for d in p.get("devices") or ()) if p.get("devices") else "")
        for p in ps)
