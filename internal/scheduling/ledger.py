"""The allocation ledger: who holds which GPU of which node.

Invariants (DESIGN.md):

1. A device of a node is held by at most one workload key, except that one
   workload's own placements may name a device several times (its annotation map
   sharing a device between its replicas).
2. ``assume`` books a decision in memory before the status write; ``commit`` marks
   it written (the placement in ``status.placements`` is the commit point);
   ``forget`` releases it (failed write, deletion, children finished).
3. ``Ledger.rebuild`` recreates the book from the cache (workload placements and
   bound pods) before any new placement is made.

Two kinds of holdings:

- *named*: specific device indices (exposure ``cuda-visible-devices`` or
  ``nvidia-visible-devices``);
- *counted*: a number of GPUs of a node without naming them: GPU pods the
  controller did not create (their ``nvidia.com/gpu`` requests) and workloads in
  ``device-plugin`` exposure, where the kubelet picks the devices.

``free_count(node) = |usable - named-held| - counted``. Free capacity is indexed in
buckets of nodes by free count (each bucket a sorted list of names), so a decision
looks at the nodes with enough free GPUs first instead of scanning every node.

Not thread-safe: callers serialize schedule + assume (one lock in the controller).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from api.v1alpha1.types import GPUWorkload, Phase, Placement

WORKLOAD_LABEL = "gpu.orchestrator.dev/workload"
GPU_RESOURCE = "nvidia.com/gpu"


class LedgerConflict(Exception):
    """An assume would break an invariant; the message names node and devices."""


@dataclass(slots=True)
class Allocation:
    key: str
    placements: tuple[Placement, ...]
    counted: dict[str, int] = field(default_factory=dict)  # node -> GPUs (device-plugin)
    priority: int = 0
    committed: bool = False
    gpus_per_replica: int = 0

    @property
    def nodes(self) -> list[str]:
        return sorted({p.node for p in self.placements})


class FreeIndex:
    """Buckets of node names by free GPU count; each bucket kept sorted by name."""

    def __init__(self) -> None:
        self._free: dict[str, int] = {}
        self._buckets: dict[int, list[str]] = {}

    def set(self, node: str, free: int) -> None:
        old = self._free.get(node)
        if old == free:
            return
        if old is not None:
            self._discard(node, old)
        self._free[node] = free
        bucket = self._buckets.setdefault(free, [])
        bisect.insort(bucket, node)

    def _discard(self, node: str, free: int) -> None:
        bucket = self._buckets[free]
        i = bisect.bisect_left(bucket, node)
        del bucket[i]
        if not bucket:
            del self._buckets[free]

    def remove(self, node: str) -> None:
        old = self._free.pop(node, None)
        if old is not None:
            self._discard(node, old)

    def get(self, node: str) -> int:
        return self._free.get(node, 0)

    def __contains__(self, node: str) -> bool:
        return node in self._free

    def __len__(self) -> int:
        return len(self._free)

    def counts(self) -> dict[int, int]:
        """free count -> number of nodes."""
        return {k: len(v) for k, v in self._buckets.items()}

    def iter_nodes(self, min_free: int, *, most_free_first: bool = True) -> Iterator[str]:
        """Nodes with at least ``min_free`` free GPUs, bucket by bucket (name order
        within a bucket), from the most free (or the least free) bucket."""
        keys = sorted((k for k in self._buckets if k >= min_free), reverse=most_free_first)
        for k in keys:
            bucket = self._buckets.get(k)
            if bucket:
                # copy: callers may change the ledger while iterating a decision
                yield from tuple(bucket)

    def buckets(self, min_free: int) -> list[list[str]]:
        """The live bucket lists with at least ``min_free`` free, most free first.
        Read-only, and only while the ledger does not change."""
        return [self._buckets[k] for k in sorted(self._buckets, reverse=True) if k >= min_free]

    def count_below(self, min_free: int) -> int:
        return sum(len(v) for k, v in self._buckets.items() if k < min_free)


class Ledger:
    def __init__(self) -> None:
        self._usable: dict[str, frozenset[int]] = {}
        self._holders: dict[str, dict[int, str]] = {}  # node -> device -> key
        self._counted: dict[str, dict[str, int]] = {}  # node -> key -> GPUs
        self._allocs: dict[str, Allocation] = {}
        self._pods: dict[str, tuple[str, int]] = {}  # foreign pod key -> (node, gpus)
        self.index = FreeIndex()

    # ------------------------------------------------------------------- nodes

    def set_node_devices(self, node: str, usable: Iterable[int]) -> None:
        """Declare the usable (healthy) device indices of ``node``."""
        self._usable[node] = frozenset(usable)
        self._reindex(node)

    def remove_node(self, node: str) -> None:
        """The node is gone: it offers nothing. Holdings on it stay until forgotten."""
        self._usable.pop(node, None)
        self.index.remove(node)

    def known_nodes(self) -> list[str]:
        return sorted(self._usable)

    def _reindex(self, node: str) -> None:
        if node in self._usable:
            self.index.set(node, self.free_count(node))

    # ------------------------------------------------------------------ queries

    def usable(self, node: str) -> frozenset[int]:
        return self._usable.get(node, frozenset())

    def holders(self, node: str) -> Mapping[int, str]:
        """device index -> workload key holding it."""
        return self._holders.get(node, {})

    def holder(self, node: str, device: int) -> str | None:
        return self._holders.get(node, {}).get(device)

    def counted(self, node: str) -> Mapping[str, int]:
        """key -> GPUs held without naming devices (foreign pods, device-plugin)."""
        return self._counted.get(node, {})

    def counted_total(self, node: str) -> int:
        return sum(self._counted.get(node, {}).values())

    def free_devices(self, node: str) -> frozenset[int]:
        held = self._holders.get(node, {})
        return frozenset(d for d in self._usable.get(node, ()) if d not in held)

    def free_count(self, node: str) -> int:
        return max(0, len(self.free_devices(node)) - self.counted_total(node))

    def allocation(self, key: str) -> Allocation | None:
        return self._allocs.get(key)

    def allocations(self) -> Mapping[str, Allocation]:
        return self._allocs

    def is_committed(self, key: str) -> bool:
        a = self._allocs.get(key)
        return a is not None and a.committed

    def priority_of(self, key: str) -> int:
        a = self._allocs.get(key)
        return a.priority if a is not None else 0

    def keys_on(self, node: str) -> set[str]:
        return set(self._holders.get(node, {}).values()) | {
            k for k in self._counted.get(node, {}) if k in self._allocs
        }

    # --------------------------------------------------------------- mutations

    def assume(
        self,
        key: str,
        placements: Sequence[Placement],
        *,
        gpus_per_replica: int = 0,
        priority: int = 0,
        committed: bool = False,
        check_capacity: bool = True,
    ) -> Allocation:
        """Book ``placements`` for workload ``key`` (replacing what it held).

        Placements with devices are named holdings. A placement with no devices
        (device-plugin mode) holds ``gpus_per_replica`` GPUs of its node, counted.
        Raises LedgerConflict, leaving the ledger unchanged, when a device is held
        by another workload or (with ``check_capacity``) a node lacks the capacity.
        """
        previous = self._allocs.get(key)
        if previous is not None:
            self._release(previous)
        try:
            alloc = self._take(key, placements, gpus_per_replica, priority, check_capacity)
        except LedgerConflict:
            if previous is not None:
                self._apply(previous)
            raise
        alloc.committed = committed
        return alloc

    def commit(self, key: str) -> None:
        """The placement of ``key`` is written to status: the booking is durable."""
        a = self._allocs.get(key)
        if a is None:
            raise KeyError(key)
        a.committed = True

    def forget(self, key: str) -> Allocation | None:
        """Release everything ``key`` holds. Returns what it held (None if nothing)."""
        a = self._allocs.get(key)
        if a is not None:
            self._release(a)
        return a

    def set_foreign_pod(self, pod_key: str, node: str | None, gpus: int) -> None:
        """Count a GPU pod the controller did not create (``node`` None or gpus 0:
        remove). Never refused: such pods exist whatever the ledger thinks."""
        self.remove_foreign_pod(pod_key)
        if not node or gpus <= 0:
            return
        self._pods[pod_key] = (node, gpus)
        self._counted.setdefault(node, {})[f"pod:{pod_key}"] = gpus
        self._reindex(node)

    def has_foreign_pod(self, pod_key: str) -> bool:
        return pod_key in self._pods

    def foreign_pods(self) -> Mapping[str, tuple[str, int]]:
        """pod key -> (node, GPUs) of the counted pods the controller did not create."""
        return self._pods

    def remove_foreign_pod(self, pod_key: str) -> None:
        old = self._pods.pop(pod_key, None)
        if old is None:
            return
        node, _ = old
        c = self._counted.get(node, {})
        c.pop(f"pod:{pod_key}", None)
        if not c:
            self._counted.pop(node, None)
        self._reindex(node)

    # ---------------------------------------------------------------- internals

    def _take(
        self,
        key: str,
        placements: Sequence[Placement],
        gpus_per_replica: int,
        priority: int,
        check_capacity: bool,
    ) -> Allocation:
        named: dict[str, set[int]] = {}
        counted: dict[str, int] = {}
        for p in placements:
            if p.devices:
                named.setdefault(p.node, set()).update(p.devices)
            else:
                counted[p.node] = counted.get(p.node, 0) + gpus_per_replica
        for node, devs in named.items():
            held = self._holders.get(node, {})
            taken = sorted(d for d in devs if held.get(d, key) != key)
            if taken:
                owners = sorted({held[d] for d in taken})
                raise LedgerConflict(
                    f"{node}: device(s) {','.join(map(str, taken))} held by {', '.join(owners)}"
                )
        if check_capacity:
            for node in set(named) | set(counted):
                usable = self._usable.get(node)
                if usable is None:
                    raise LedgerConflict(f"{node}: unknown node")
                devs = named.get(node, set())
                missing = sorted(devs - usable)
                if missing:
                    raise LedgerConflict(
                        f"{node}: device(s) {','.join(map(str, missing))} not usable"
                    )
                free_after = self.free_count(node) - len(devs) - counted.get(node, 0)
                if free_after < 0:
                    raise LedgerConflict(
                        f"{node}: {self.free_count(node)} free GPU(s), needs "
                        f"{len(devs) + counted.get(node, 0)}"
                    )
        alloc = Allocation(key, tuple(placements), counted, priority, False, gpus_per_replica)
        self._apply(alloc)
        return alloc

    def _apply(self, alloc: Allocation) -> None:
        touched = set()
        for p in alloc.placements:
            if p.devices:
                h = self._holders.setdefault(p.node, {})
                for d in p.devices:
                    h[d] = alloc.key
                touched.add(p.node)
        for node, n in alloc.counted.items():
            self._counted.setdefault(node, {})[alloc.key] = n
            touched.add(node)
        self._allocs[alloc.key] = alloc
        for node in touched:
            self._reindex(node)

    def _release(self, alloc: Allocation) -> None:
        touched = set()
        for p in alloc.placements:
            h = self._holders.get(p.node)
            if h is not None:
                for d in p.devices:
                    if h.get(d) == alloc.key:
                        del h[d]
                if not h:
                    del self._holders[p.node]
            touched.add(p.node)
        for node in alloc.counted:
            c = self._counted.get(node)
            if c is not None:
                c.pop(alloc.key, None)
                if not c:
                    del self._counted[node]
            touched.add(node)
        self._allocs.pop(alloc.key, None)
        for node in touched:
            self._reindex(node)

    # ------------------------------------------------------------------ rebuild

    @classmethod
    def rebuild(
        cls,
        workloads: Iterable[GPUWorkload | Mapping[str, Any]],
        pods: Iterable[Mapping[str, Any]] = (),
        node_devices: Mapping[str, Iterable[int]] | None = None,
    ) -> tuple[Ledger, list[str]]:
        """A ledger from the cache: committed placements of workloads that still
        hold devices, plus GPU requests of bound, unfinished pods the controller did
        not create. Returns the ledger and a list of problems found (placements
        conflicting with one another are kept for the first workload by key and
        reported, never silently merged).
        """
        ledger = cls()
        for node, devs in (node_devices or {}).items():
            ledger.set_node_devices(node, devs)
        problems: list[str] = []
        parsed: list[GPUWorkload] = []
        for raw in workloads:
            w, problem = _parse_workload(raw)
            if problem:
                problems.append(problem)
            if w is not None:
                parsed.append(w)
        for w in sorted(parsed, key=lambda w: w.key):
            if not holds_devices(w):
                continue
            try:
                ledger.assume(
                    w.key,
                    w.status.placements,
                    gpus_per_replica=w.spec.gpus,
                    priority=w.spec.priority,
                    committed=True,
                    check_capacity=False,
                )
            except LedgerConflict as e:
                problems.append(f"{w.key}: {e}")
        for pod in pods:
            if is_controller_pod(pod) or not pod_is_active(pod):
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            gpus = pod_gpu_request(pod)
            if node and gpus:
                ledger.set_foreign_pod(pod_key(pod), node, gpus)
        return ledger, problems


# -------------------------------------------------------------------- helpers


def _parse_workload(
    raw: GPUWorkload | Mapping[str, Any],
) -> tuple[GPUWorkload | None, str]:
    """A workload for the rebuild. An object whose spec no longer validates still
    holds what its status says: keep its placements (never lose a booking)."""
    if isinstance(raw, GPUWorkload):
        return raw, ""
    try:
        return GPUWorkload.model_validate(raw), ""
    except ValidationError as e:
        meta = raw.get("metadata") or {}
        status = raw.get("status") or {}
        spec = raw.get("spec") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        why = e.errors()[0].get("msg", str(e)) if e.errors() else str(e)
        try:
            gpus = spec.get("gpusPerReplica") or spec.get("gpuCount") or 1
            w = GPUWorkload.model_validate(
                {
                    "metadata": meta,
                    "spec": {"gpusPerReplica": int(gpus)},
                    "status": {
                        "phase": status.get("phase") or "Pending",
                        "placements": status.get("placements") or [],
                    },
                }
            )
        except (ValidationError, TypeError, ValueError):
            return None, f"{key}: unreadable, ignored: {why}"
        return w, f"{key}: invalid spec, placements kept: {why}"


def holds_devices(w: GPUWorkload) -> bool:
    """Does this workload's committed placement still hold devices?"""
    if not w.status.placements:
        return False
    return w.status.phase not in (Phase.SUCCEEDED, Phase.FAILED)


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def is_controller_pod(pod: Mapping[str, Any]) -> bool:
    """Created by this controller (directly, or through a Job): carries the workload
    label or is owned by a GPUWorkload."""
    meta = pod.get("metadata") or {}
    if WORKLOAD_LABEL in (meta.get("labels") or {}):
        return True
    return any(o.get("kind") == "GPUWorkload" for o in meta.get("ownerReferences") or ())


def _qty(v: Any) -> int:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return 0


def pod_gpu_request(pod: Mapping[str, Any]) -> int:
    """GPUs a pod takes: the max of its init containers' and the sum of its
    containers' ``nvidia.com/gpu`` (limits, else requests), as the kubelet counts."""
    spec = pod.get("spec") or {}

    def one(c: Mapping[str, Any]) -> int:
        res = c.get("resources") or {}
        lim = (res.get("limits") or {}).get(GPU_RESOURCE)
        if lim is not None:
            return _qty(lim)
        return _qty((res.get("requests") or {}).get(GPU_RESOURCE))

    main = sum(one(c) for c in spec.get("containers") or ())
    init = max((one(c) for c in spec.get("initContainers") or ()), default=0)
    return max(main, init)
