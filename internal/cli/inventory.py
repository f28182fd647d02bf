"""The GPU picture of a cluster, computed from raw API objects (pure, no I/O):
which device of which node is free or held by which workload, and the totals.

Sources, in order of trust:

- devices of a node: its GPUNode ``status.devices`` (index, model, memory, health),
  else indices ``0..n-1`` of the node's ``nvidia.com/gpu`` allocatable (health unknown);
- holders: workloads' ``status.placements`` (while the workload is not finished),
  and bound, unfinished pods that carry the ``gpu.orchestrator.dev/devices``
  annotation (children, and the seed path's StatefulSet pods);
- GPUs held without a device index: ``device-plugin`` placements (the kubelet picks
  the devices) and other pods' ``nvidia.com/gpu`` requests. They are counted, not named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION, GPU_RESOURCE, NODE_ANNOTATION, WORKLOAD_LABEL
from internal.scheduling.pods import is_controller_pod, pod_gpu_request, pod_is_active

JSON = dict[str, Any]

FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass
class Device:
    index: int
    holder: str | None = None  # "namespace/workload[replica]"
    health: str = "Unknown"  # Healthy, Unhealthy, Unknown
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
    source: str  # "GPUNode" or "allocatable"
    devices: list[Device] = field(default_factory=list)
    counted: dict[str, int] = field(default_factory=dict)  # holder -> GPUs, no index
    heartbeat: str | None = None

    @property
    def total(self) -> int:
        return len(self.devices)

    @property
    def allocated(self) -> int:
        named = sum(1 for d in self.devices if not d.free)
        return min(self.total, named + sum(self.counted.values()))

    @property
    def free(self) -> int:
        return self.total - self.allocated

    @property
    def unhealthy(self) -> int:
        return sum(1 for d in self.devices if d.health == "Unhealthy")

    def to_dict(self) -> JSON:
        return {
            "name": self.name, "source": self.source, "total": self.total,
            "allocated": self.allocated, "free": self.free, "unhealthy": self.unhealthy,
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
              workloads: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
              ) -> list[NodeGPUs]:
    """One :class:`NodeGPUs` per node that has GPUs (or a GPUNode), by name."""
    by_gpunode: dict[str, Mapping[str, Any]] = {}
    for g in gpunodes:
        name = (g.get("spec") or {}).get("nodeName") or g["metadata"]["name"]
        by_gpunode[name] = g
    out: dict[str, NodeGPUs] = {}
    for n in nodes:
        name = n["metadata"]["name"]
        g = by_gpunode.get(name)
        if g is not None and (g.get("status") or {}).get("devices"):
            out[name] = _from_gpunode(name, g)
            continue
        alloc = ((n.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE)
        count = _qty(alloc)
        if count or g is not None:
            out[name] = NodeGPUs(name, "allocatable",
                                 [Device(i) for i in range(count)],
                                 heartbeat=_heartbeat(g))
    for name, g in by_gpunode.items():  # GPUNode without a Node object (node deleted)
        if name not in out and (g.get("status") or {}).get("devices"):
            out[name] = _from_gpunode(name, g)

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
    return [out[k] for k in sorted(out)]


def _pod_index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _qty(v: Any) -> int:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return 0


def _heartbeat(g: Mapping[str, Any] | None) -> str | None:
    return None if g is None else (g.get("status") or {}).get("lastHeartbeatTime")


def _from_gpunode(name: str, g: Mapping[str, Any]) -> NodeGPUs:
    devs = []
    for d in sorted((g.get("status") or {}).get("devices") or (), key=lambda d: d["index"]):
        devs.append(Device(
            index=int(d["index"]),
            health="Healthy" if d.get("healthy", True) else "Unhealthy",
            model=d.get("model") or "",
            memory_total_mib=d.get("memoryTotalMiB"),
            memory_used_mib=d.get("memoryUsedMiB"),
            utilization=d.get("utilization"),
        ))
    return NodeGPUs(name, "GPUNode", devs, heartbeat=_heartbeat(g))


@dataclass
class Totals:
    nodes: int
    total: int
    allocated: int
    free: int
    unhealthy: int
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
