"""What the scheduler knows about nodes: a snapshot built from raw Node and GPUNode
dicts (as they come from the cache; no pydantic on this hot path).

Devices of a node come from its GPUNode (index, uuid, memory, utilization, health,
NVLink peers) when the agent reports one; otherwise the node's allocatable
``nvidia.com/gpu`` gives ``n`` healthy devices ``0..n-1`` of unknown memory and
unknown topology.

Price: the node label ``gpu.orchestrator.dev/cost`` holds either a number (relative
price per GPU-hour, lower is cheaper) or one of the words ``cheap`` (= 1),
``standard`` (= 10) and ``expensive`` (= 100). Unlabelled nodes count as standard.
The costOptimized strategy prefers the lowest cost.

A GPUNode describes the node of its own name (``metadata.name``). One whose
``spec.nodeName`` names another node is ignored (:meth:`Snapshot.upsert_gpunode`
returns why, and :attr:`Snapshot.ignored` keeps it): otherwise a GPUNode named
``evil`` could give ``node1`` sixteen phantom devices. The admission policy of
config/crd refuses such an object; this is the second line. Deleting a GPUNode
removes its devices at once (it is stored and removed under the same name).

A node that reports more GPUs than ``max_gpus`` (``bounds.py``: its allocatable, its
GPUNode's or its ResourceSlices' device list, a device's MIG instances) is refused:
it offers nothing, ``NodeInfo.refused`` says why (the filters' reason for it), and
:attr:`Snapshot.newly_refused` names it once per refusal for the caller to report.

The snapshot keeps the ledger informed of each node's usable devices, so that the
ledger's free-capacity index is right (``Snapshot(ledger)`` then ``upsert_*``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from internal.scheduling.bounds import MAX_GPUS_PER_NODE, count_refusal, devices_refusal
from internal.scheduling.inventory import (
    DEFAULT_STALE_AFTER,
    DRA_DRIVER_ANNOTATION,
    SOURCE_ANNOTATION,
    allocatable_gpus,
    is_stale,
    stale_view,
)
from internal.scheduling.nodeusage import NodeUsage, node_allocatable
from internal.scheduling.shares import MigInstance, NodeSharing

if TYPE_CHECKING:
    from internal.scheduling.ledger import Ledger

COST_LABEL = "gpu.orchestrator.dev/cost"
COST_WORDS: dict[str, float] = {"cheap": 1.0, "standard": 10.0, "expensive": 100.0}
DEFAULT_COST = COST_WORDS["standard"]


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    index: int
    uuid: str = ""
    model: str = ""
    memory_total_mib: int | None = None
    memory_used_mib: int = 0
    utilization: int = 0
    healthy: bool = True
    nvlink_peers: frozenset[int] = frozenset()
    #: MIG mode is on: the device is offered only as its MIG instances (``mig``)
    mig_mode: bool = False
    mig: tuple[MigInstance, ...] = ()


_UTILIZATION = attrgetter("utilization")


@dataclass(slots=True)
class NodeInfo:
    name: str
    ready: bool = True
    unschedulable: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, Any], ...] = ()
    devices: dict[int, DeviceInfo] = field(default_factory=dict)
    topology_known: bool = False
    has_gpunode: bool = False
    #: the GPUNode's heartbeat is stale (see inventory.stale_view): nothing offered
    stale: bool = False
    cost: float = DEFAULT_COST
    #: the DRA driver whose ResourceSlices publish this node's GPUs ('' if none)
    dra_driver: str = ""
    #: why the node is refused (it reports too much, ``bounds.py``): nothing offered
    refused: str = ""
    #: status.allocatable in node fit's units, nvidia.com/gpu kept even at 0
    #: (``nodeusage.py``; shared by nodes that list the same: read only)
    allocatable: dict[str, int] = field(default_factory=dict)

    @property
    def usable(self) -> frozenset[int]:
        """Indices of healthy devices that may be held whole or shared (not
        MIG-enabled: those are offered only as their instances, see ``sharing``)."""
        return frozenset(i for i, d in self.devices.items() if d.healthy and not d.mig_mode)

    def sharing(self) -> NodeSharing:
        """What the ledger weighs shares and MIG instances with (healthy devices)."""
        healthy = [d for d in self.devices.values() if d.healthy]
        return NodeSharing(
            memory={d.index: d.memory_total_mib for d in healthy if not d.mig_mode},
            mig={d.index: {m.uuid: m for m in d.mig} for d in healthy if d.mig_mode})

    @property
    def unhealthy(self) -> frozenset[int]:
        """Indices of devices not offered because they are not healthy (on a stale
        node: every device, see ``stale``)."""
        return frozenset(i for i, d in self.devices.items() if not d.healthy)

    @property
    def mean_utilization(self) -> float:
        if not self.devices:
            return 0.0
        # summed at C speed, in the same order (leastLoaded asks it of every node
        # a decision visits)
        return sum(map(_UTILIZATION, self.devices.values())) / len(self.devices)

    def max_memory_mib(self, devices: Iterable[int] | None = None) -> int | None:
        """The largest memoryTotalMiB among ``devices`` (default: the usable ones);
        None when any of them does not report memory (no GPUNode) or there are none."""
        idx = self.usable if devices is None else devices
        mems = [self.devices[i].memory_total_mib if i in self.devices else None for i in idx]
        if not mems or any(m is None for m in mems):
            return None
        return max(m for m in mems if m is not None)

    @property
    def cheap(self) -> bool:
        return self.cost <= COST_WORDS["cheap"]


def parse_cost(labels: Mapping[str, str]) -> float:
    raw = labels.get(COST_LABEL)
    if raw is None:
        return DEFAULT_COST
    raw = raw.strip().lower()
    if raw in COST_WORDS:
        return COST_WORDS[raw]
    try:
        v = float(raw)
    except ValueError:
        return DEFAULT_COST
    return v if v >= 0 else DEFAULT_COST


def node_gpu_count(node: Mapping[str, Any]) -> int:
    """The Node's allocatable (else capacity) ``nvidia.com/gpu``."""
    return allocatable_gpus(node)


def _ready(node: Mapping[str, Any]) -> bool:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


#: (index, healthy) -> the one DeviceInfo of a device known only from allocatable:
#: frozen, so every node without an agent shares them (8,000 objects at 1,000 nodes
#: of 8 GPUs were 16). At most 2 x MAX_GPUS_PER_NODE: a larger count is refused.
_PLAIN: dict[tuple[int, bool], DeviceInfo] = {}


def _plain_device(index: int, healthy: bool) -> DeviceInfo:
    d = _PLAIN.get((index, healthy))
    if d is None:
        d = _PLAIN[(index, healthy)] = DeviceInfo(index=index, healthy=healthy)
    return d


def _devices_from_gpunode(gpunode: Mapping[str, Any]) -> tuple[dict[int, DeviceInfo], bool]:
    status = gpunode.get("status") or {}
    out: dict[int, DeviceInfo] = {}
    any_peers = False
    for d in status.get("devices") or ():
        peers = frozenset(int(p) for p in d.get("nvlinkPeers") or ())
        any_peers = any_peers or bool(peers)
        idx = int(d.get("index", 0))
        mem = d.get("memoryTotalMiB")
        out[idx] = DeviceInfo(
            index=idx,
            uuid=str(d.get("uuid") or ""),
            model=str(d.get("model") or ""),
            memory_total_mib=int(mem) if mem is not None else None,
            memory_used_mib=int(d.get("memoryUsedMiB") or 0),
            utilization=int(d.get("utilization") or 0),
            healthy=bool(d.get("healthy", True)),
            nvlink_peers=peers,
            mig_mode=bool(d.get("migMode", False)),
            mig=tuple(MigInstance(str(m.get("uuid") or ""), str(m.get("profile") or ""),
                                  int(m.get("memoryTotalMiB") or 0))
                      for m in d.get("migInstances") or () if m.get("uuid")),
        )
    known = bool(status.get("topologyKnown", False)) or any_peers
    return out, known


def gpunode_at(
    gpunode: Mapping[str, Any], now: datetime, stale_after: timedelta | float = DEFAULT_STALE_AFTER
) -> Mapping[str, Any]:
    """What the scheduler sees of a GPUNode at ``now``: itself while its agent's
    heartbeat is fresh, else its ``stale_view`` (nothing offered)."""
    return stale_view(gpunode) if is_stale(gpunode, now, stale_after) else gpunode


def gpunode_name(gpunode: Mapping[str, Any]) -> str:
    """The node a GPUNode describes: its own name, always."""
    return str((gpunode.get("metadata") or {}).get("name") or "")


def gpunode_mismatch(gpunode: Mapping[str, Any]) -> str | None:
    """Why a GPUNode cannot be trusted for its node, or None when it can."""
    name = gpunode_name(gpunode)
    claimed = (gpunode.get("spec") or {}).get("nodeName")
    if claimed and claimed != name:
        return (f"GPUNode {name} ignored: spec.nodeName {claimed!r} differs from its name "
                "(a GPUNode describes only the node of its own name)")
    return None


class Snapshot:
    """Nodes by name, kept in name order, and mirrored into the ledger's capacity."""

    def __init__(self, ledger: Ledger | None = None,
                 max_gpus: int = MAX_GPUS_PER_NODE) -> None:
        self.max_gpus = max_gpus
        #: node -> (why it is refused, what reported it); see ``bounds.py``
        self.refused: dict[str, tuple[str, str]] = {}
        #: nodes refused, or refused for another reason, since ``take_refused``
        self.newly_refused: list[str] = []
        self.nodes: dict[str, NodeInfo] = {}
        self._names: list[str] = []  # sorted
        self._raw_nodes: dict[str, Mapping[str, Any]] = {}
        self._gpunodes: dict[str, Mapping[str, Any]] = {}
        #: GPUNode name -> why it is ignored (see :func:`gpunode_mismatch`)
        self.ignored: dict[str, str] = {}
        self.ledger = ledger
        #: what each node's pods request (kept by the pod events; node fit reads it)
        self.usage = NodeUsage()
        self._cost_levels: list[tuple[float, list[str]]] | None = None

    @property
    def usage(self) -> NodeUsage:
        return self._usage

    @usage.setter
    def usage(self, usage: NodeUsage) -> None:
        """What each node's pods request; a change of it stamps the node in the
        ledger's ``stamps`` (node fit reads it)."""
        self._usage = usage
        usage.touched = self._touch

    def _touch(self, node: str) -> None:
        if self.ledger is not None:
            self.ledger.stamps.touch(node)

    # ----------------------------------------------------------------- building

    @classmethod
    def build(
        cls,
        nodes: Iterable[Mapping[str, Any]],
        gpunodes: Iterable[Mapping[str, Any]] = (),
        ledger: Ledger | None = None,
        max_gpus: int = MAX_GPUS_PER_NODE,
    ) -> Snapshot:
        snap = cls(ledger, max_gpus)
        for g in gpunodes:
            snap._store_gpunode(g)
        for n in nodes:
            snap.upsert_node(n)
        return snap

    @classmethod
    def build_at(
        cls,
        nodes: Iterable[Mapping[str, Any]],
        gpunodes: Iterable[Mapping[str, Any]],
        now: datetime,
        stale_after: timedelta | float = DEFAULT_STALE_AFTER,
        ledger: Ledger | None = None,
    ) -> Snapshot:
        """The snapshot the controller places with at ``now``: every GPUNode whose
        heartbeat is older than ``stale_after`` replaced by its ``stale_view`` (its
        devices not offered). ``kubectl gpu`` builds its view with this too, so both
        count free, unhealthy and stale devices the same way."""
        return cls.build(nodes, [gpunode_at(g, now, stale_after) for g in gpunodes], ledger)

    def _recompute(self, name: str) -> None:
        raw = self._raw_nodes.get(name)
        if raw is None:
            return
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        labels = dict(meta.get("labels") or {})
        g = self._gpunodes.get(name)
        stale = g is not None and (
            ((g.get("metadata") or {}).get("annotations") or {}).get(SOURCE_ANNOTATION) == "stale"
        )
        reported = (g.get("status") or {}).get("devices") if g is not None else None
        refused, source = self._judge(raw, g, reported)
        if refused:
            devices, topo = {}, False
        elif reported:
            devices, topo = _devices_from_gpunode(g or {})
        else:
            # no agent report: the allocatable devices (none offered when stale)
            devices = {i: _plain_device(i, not stale) for i in range(node_gpu_count(raw))}
            topo = False
        info = NodeInfo(
            name=name,
            ready=_ready(raw),
            unschedulable=bool(spec.get("unschedulable", False)),
            labels=labels,
            taints=tuple(spec.get("taints") or ()),
            devices=devices,
            topology_known=topo,
            has_gpunode=g is not None,
            stale=stale,
            cost=parse_cost(labels),
            dra_driver=str((((g or {}).get("metadata") or {}).get("annotations") or {}).get(
                DRA_DRIVER_ANNOTATION) or ""),
            refused=refused or "",
            allocatable=node_allocatable(raw),
        )
        old = self.nodes.get(name)
        if refused and (old is None or old.refused != refused):
            self.newly_refused.append(name)
        if refused:
            self.refused[name] = (refused, source)
        else:
            self.refused.pop(name, None)
        if old == info:
            # a heartbeat: nothing a decision reads changed. No stamp (a pass made
            # meanwhile stays valid), no reindex, and readers keep the record they hold
            return
        if old is None:
            bisect.insort(self._names, name)
        if old is None or old.cost != info.cost:
            self._cost_levels = None
        self.nodes[name] = info
        if self.ledger is not None:
            self.ledger.set_node_devices(name, info.usable, info.sharing(), len(info.devices))

    def _judge(self, raw: Mapping[str, Any], g: Mapping[str, Any] | None,
               reported: Any) -> tuple[str | None, str]:
        """(why the node is refused or None, what reported it): counts only."""
        if reported:
            dra = ((g or {}).get("metadata") or {}).get("annotations") or {}
            source = ("its ResourceSlices" if DRA_DRIVER_ANNOTATION in dra
                      else "its GPUNode's status.devices")
            return devices_refusal(reported, self.max_gpus), source
        return (count_refusal(node_gpu_count(raw), self.max_gpus),
                "its Node's status nvidia.com/gpu")

    def take_refused(self) -> list[tuple[Mapping[str, Any], str, str]]:
        """(the Node, why, what reported it) of each node refused since last asked."""
        names, self.newly_refused = self.newly_refused, []
        return [(self._raw_nodes[n], *self.refused[n]) for n in dict.fromkeys(names)
                if n in self.refused and n in self._raw_nodes]

    def upsert_node(self, node: Mapping[str, Any]) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        self._raw_nodes[name] = node
        self._recompute(name)

    def _store_gpunode(self, gpunode: Mapping[str, Any]) -> str | None:
        name = gpunode_name(gpunode)
        why = gpunode_mismatch(gpunode)
        if why is None:
            self._gpunodes[name] = gpunode
            self.ignored.pop(name, None)
        else:
            self._gpunodes.pop(name, None)  # what it said before no longer counts
            self.ignored[name] = why
        return why

    def upsert_gpunode(self, gpunode: Mapping[str, Any]) -> str | None:
        """Use ``gpunode`` for the node of its name; returns why it is ignored instead
        (its node then falls back to its allocatable), or None."""
        why = self._store_gpunode(gpunode)
        self._recompute(gpunode_name(gpunode))
        return why

    def remove_gpunode(self, name: str) -> None:
        """The GPUNode ``name`` is gone: its node's devices are recomputed now."""
        self._gpunodes.pop(name, None)
        self.ignored.pop(name, None)
        self._recompute(name)

    def remove_node(self, name: str, uid: str = "") -> bool:
        """The Node is gone. With ``uid``: only if the Node recorded under ``name``
        is that one (a late delete of an older Node of that name removes nothing).
        True unless it was such a late delete."""
        have = (self._raw_nodes.get(name) or {}).get("metadata") or {}
        if uid and have.get("uid") and have["uid"] != uid:
            return False
        self._raw_nodes.pop(name, None)
        self.refused.pop(name, None)
        if self.nodes.pop(name, None) is not None:
            i = bisect.bisect_left(self._names, name)
            del self._names[i]
            self._cost_levels = None
        if self.ledger is not None:
            self.ledger.remove_node(name)
        return True

    def attach(self, ledger: Ledger) -> None:
        """Use ``ledger`` and tell it every node's usable devices."""
        self.ledger = ledger
        for name, info in self.nodes.items():
            ledger.set_node_devices(name, info.usable, info.sharing(), len(info.devices))

    # ------------------------------------------------------------------- reading

    def __len__(self) -> int:
        return len(self.nodes)

    def get(self, name: str) -> NodeInfo | None:
        return self.nodes.get(name)

    @property
    def names(self) -> list[str]:
        """Node names in ascending order (do not mutate)."""
        return self._names

    def names_after(self, name: str | None) -> Iterator[str]:
        """All names in order starting after ``name``, wrapping around (lazily)."""
        names = self._names
        start = 0 if name is None else bisect.bisect_right(names, name)
        for i in range(len(names)):
            yield names[(start + i) % len(names)]

    def cost_levels(self) -> list[tuple[float, list[str]]]:
        """(cost, names in order) from the cheapest level up."""
        if self._cost_levels is None:
            levels: dict[float, list[str]] = {}
            for name in self._names:
                levels.setdefault(self.nodes[name].cost, []).append(name)
            self._cost_levels = sorted(levels.items())
        return self._cost_levels
