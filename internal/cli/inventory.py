"""The GPU picture of a cluster, computed from raw API objects (pure, no I/O):
which device of which node is free or held by which workload, and the totals.

One inventory, one truth: the devices of a node, their health and whether the node's
GPU agent is stale come from the controller's own code
(``internal.scheduling.snapshot.Snapshot.build_at``: the GPUNode's
``status.devices`` when its agent reports, else ``0..n-1`` from the node's
``nvidia.com/gpu`` allocatable; a GPUNode whose heartbeat is older than the stale
threshold offers nothing). A device counts as free exactly when the controller would
offer it: healthy, on a node whose agent is not stale, and not held.

Holders:

- workloads' ``status.placements`` (while the workload is not finished), and bound,
  unfinished pods that carry the ``gpu.orchestrator.dev/devices`` annotation
  (children, and the seed path's StatefulSet pods);
- GPUs held without a device index: ``device-plugin`` placements (the kubelet picks
  the devices) and other pods' ``nvidia.com/gpu`` requests. They are counted, not
  named, and taken from the free count as the controller does;
- allocated ResourceClaims of the DRA driver that no GPUWorkload controls (kube-
  scheduler's, anybody's): held by ``namespace/claim/<name>`` until their allocation
  is removed, located with the controller's code (``claim_holding``). Our own claims
  are shown through their workloads' placements.

With the driver's ResourceSlices, a node's devices come from them (merged with its
GPUNode's health), as the controller reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION, NODE_ANNOTATION, WORKLOAD_LABEL
from internal.scheduling.inventory import DEFAULT_STALE_AFTER
from internal.scheduling.pods import (
    controller_ref,
    is_controller_pod,
    pod_gpu_request,
    pod_is_active,
)
from internal.scheduling.resourceslices import (
    DEFAULT_DRIVER,
    BadClaim,
    claim_holding,
    claim_key,
    inventory_of,
    with_slices,
)
from internal.scheduling.snapshot import NodeInfo, Snapshot, gpunode_at, gpunode_name

JSON = dict[str, Any]

FINISHED_PHASES = ("Succeeded", "Failed")

#: Device.health values
HEALTHY, UNHEALTHY, STALE, UNKNOWN = "Healthy", "Unhealthy", "Stale", "Unknown"


@dataclass
class Device:
    index: int
    holder: str | None = None  # "namespace/workload[replica]"
    #: Healthy; Unhealthy (reported by the agent); Stale (the agent stopped
    #: reporting); Unknown (no GPUNode: from allocatable, offered as healthy)
    health: str = UNKNOWN
    #: the controller offers this device to new placements (healthy, agent not stale)
    offered: bool = False
    model: str = ""
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    utilization: int | None = None

    @property
    def free(self) -> bool:
        return self.holder is None


@dataclass
class NodeGPUs:
    name: str
    source: str  # "GPUNode", "ResourceSlice" or "allocatable"
    devices: list[Device] = field(default_factory=list)
    counted: dict[str, int] = field(default_factory=dict)  # holder -> GPUs, no index
    heartbeat: str | None = None
    #: Ready, NotReady or cordoned: the node's state as the controller's filters see it
    state: str = "Ready"

    @property
    def total(self) -> int:
        return len(self.devices)

    @property
    def allocated(self) -> int:
        named = sum(1 for d in self.devices if not d.free)
        return min(self.total, named + sum(self.counted.values()))

    @property
    def free(self) -> int:
        """Devices the controller would offer: healthy, agent not stale, not held,
        less the GPUs held without an index (the scheduler's ``free_count``)."""
        offered = sum(1 for d in self.devices if d.free and d.offered)
        return max(0, offered - sum(self.counted.values()))

    @property
    def unhealthy(self) -> int:
        return sum(1 for d in self.devices if d.health == UNHEALTHY)

    @property
    def stale(self) -> int:
        return sum(1 for d in self.devices if d.health == STALE)

    def to_dict(self) -> JSON:
        return {
            "name": self.name, "source": self.source, "state": self.state,
            "total": self.total, "allocated": self.allocated, "free": self.free,
            "unhealthy": self.unhealthy, "stale": self.stale,
            "lastHeartbeatTime": self.heartbeat,
            "devices": [
                {k: v for k, v in asdict(d).items() if v is not None} | {"free": d.free}
                for d in self.devices
            ],
            "counted": dict(self.counted),
        }


def parse_devices(text: str | None) -> list[int]:
    """``"0,1"`` (or ``"0, 1"``) to ``[0, 1]``; anything unparsable is skipped."""
    out: list[int] = []
    for tok in (text or "").split(","):
        tok = tok.strip()
        if tok.isdigit():
            out.append(int(tok))
    return out


def workload_key(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace') or 'default'}/{md.get('name')}"


def gpus_per_replica(w: Mapping[str, Any]) -> int:
    spec = w.get("spec") or {}
    return int(spec.get("gpusPerReplica") or spec.get("gpuCount") or 1)


def workload_phase(w: Mapping[str, Any]) -> str:
    return (w.get("status") or {}).get("phase") or "Pending"


def holds_devices(w: Mapping[str, Any]) -> bool:
    st = w.get("status") or {}
    return bool(st.get("placements")) and workload_phase(w) not in FINISHED_PHASES


def node_gpus(nodes: Iterable[Mapping[str, Any]], gpunodes: Iterable[Mapping[str, Any]],
              workloads: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
              *, now: datetime | None = None,
              stale_after: timedelta | float = DEFAULT_STALE_AFTER,
              slices: Iterable[Mapping[str, Any]] = (),
              claims: Iterable[Mapping[str, Any]] = (),
              driver: str = DEFAULT_DRIVER) -> list[NodeGPUs]:
    """One :class:`NodeGPUs` per node that has GPUs (or a GPUNode, or slices of the DRA
    ``driver``), by name, judged at ``now`` (default: the current time) with the
    controller's stale threshold."""
    gpunodes = list(gpunodes)
    heartbeats = {gpunode_name(g): (g.get("status") or {}).get("lastHeartbeatTime")
                  for g in gpunodes}
    reporting = {gpunode_name(g) for g in gpunodes if (g.get("status") or {}).get("devices")}
    published = inventory_of(slices, driver)
    views = with_slices([gpunode_at(g, now or datetime.now(UTC), stale_after)
                         for g in gpunodes], published)
    snap = Snapshot.build(nodes, views)
    out: dict[str, NodeGPUs] = {}
    for name in snap.names:
        info = snap.nodes[name]
        if info.devices or info.has_gpunode:
            out[name] = _from_snapshot(info, heartbeats.get(name), name in reporting)
            if published.has(name):
                out[name].source = "ResourceSlice"

    def hold(node: str, devices: list[int], holder: str, count: int) -> None:
        ng = out.get(node)
        if ng is None:
            return
        if not devices:
            ng.counted[holder] = ng.counted.get(holder, 0) + count
            return
        by_index = {d.index: d for d in ng.devices}
        for i in devices:
            d = by_index.get(i)
            if d is None:
                d = Device(i)
                ng.devices.append(d)
                ng.devices.sort(key=lambda x: x.index)
                by_index[i] = d
            if d.holder is None:
                d.holder = holder
            elif not d.holder.startswith(holder.split("[")[0] + "["):
                d.holder += f", {holder}"  # a conflict: show both, never hide one

    placed: set[tuple[str, int]] = set()  # (workload key, replica index)
    for w in workloads:
        if not holds_devices(w):
            continue
        key = workload_key(w)
        for p in (w.get("status") or {}).get("placements") or ():
            placed.add((key, int(p.get("index", 0))))
            hold(p["node"], [int(d) for d in p.get("devices") or ()],
                 f"{key}[{p.get('index', 0)}]", gpus_per_replica(w))
    for pod in pods:
        if not pod_is_active(pod):
            continue
        md = pod.get("metadata") or {}
        ann = md.get("annotations") or {}
        node = (pod.get("spec") or {}).get("nodeName") or ann.get(NODE_ANNOTATION)
        if not node:
            continue
        devices = parse_devices(ann.get(DEVICES_ANNOTATION))
        ns = md.get("namespace") or "default"
        if DEVICES_ANNOTATION in ann and devices:
            owner = (md.get("labels") or {}).get(WORKLOAD_LABEL)
            index = _pod_index(md.get("name") or "")
            if owner is not None and (f"{ns}/{owner}", index) in placed:
                continue  # already counted from the workload's placements
            holder = (f"{ns}/{owner}[{index}]" if owner is not None
                      else f"{ns}/pod/{md.get('name')}")
            hold(node, devices, holder, len(devices))
        elif not is_controller_pod(pod):
            gpus = pod_gpu_request(pod)
            if gpus:
                hold(node, [], f"{ns}/pod/{md.get('name')}", gpus)
    for claim in claims:
        if (controller_ref(claim) or {}).get("kind") == "GPUWorkload":
            continue  # ours: its workload's placements show it
        try:
            h = claim_holding(claim, published)
        except BadClaim:
            continue  # the controller reports it (UnreadableClaim)
        if h is not None:
            ns, _, name = claim_key(claim).partition("/")
            hold(h.node, list(h.devices), f"{ns}/claim/{name}", len(h.devices))
    return [out[k] for k in sorted(out)]


def _pod_index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _from_snapshot(info: NodeInfo, heartbeat: str | None, reported: bool) -> NodeGPUs:
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
    source = "GPUNode" if reported else "allocatable"
    state = "NotReady" if not info.ready else ("cordoned" if info.unschedulable else "Ready")
    return NodeGPUs(info.name, source, devs, heartbeat=heartbeat, state=state)


@dataclass
class Totals:
    nodes: int
    total: int
    allocated: int
    free: int
    unhealthy: int
    stale: int
    workloads: dict[str, int]  # phase -> count

    def to_dict(self) -> JSON:
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
