"""The placing side's view of the cluster: the snapshot of nodes and GPUs, the
ledger of who holds which device, and the scheduler over both, behind one lock.

It is rebuilt from the informers' caches before the first placement after a start
(DESIGN.md invariant 3) and then kept current by their events. Every update is
idempotent, so an event that the rebuild already saw and then delivers again
changes nothing. Only the leader's reconciler uses it (invariant 4): it is created
when the controller starts leading.
"""

from __future__ import annotations

import bisect
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from api.v1alpha1.types import DeviceExposure, GPUWorkload, Phase
from internal.scheduling.framework import Decision
from internal.scheduling.inventory import DEFAULT_STALE_AFTER, is_stale, stale_view
from internal.scheduling.ledger import (
    Ledger,
    LedgerConflict,
    is_controller_pod,
    pod_gpu_request,
    pod_is_active,
    pod_key,
)
from internal.scheduling.scheduler import Scheduler
from internal.scheduling.snapshot import Snapshot
from runtime.store import thaw

log = structlog.get_logger("placement")

JSON = Mapping[str, Any]
#: (nodes, gpunodes, workloads, pods) as listed from the caches
Sources = tuple[list[JSON], list[JSON], list[JSON], list[JSON]]


def _key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _rv(obj: JSON) -> int:
    """etcd's resourceVersions are increasing integers (opaque by contract, but
    kube-apiserver's are revisions); 0 when unknown."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def _is_placed(status: JSON) -> bool:
    return bool(status.get("placements"))


def _terminal(status: JSON) -> bool:
    return status.get("phase") in (Phase.SUCCEEDED.value, Phase.FAILED.value)


def _more_room(before: Any, after: Any) -> bool:
    """Could this node change let a waiting workload fit where it did not before?
    (Heartbeats and status churn must not wake every waiting workload.)"""
    if after is None or not after.ready or after.unschedulable:
        return False
    if before is None or not before.ready or before.unschedulable:
        return True
    return bool(after.usable - before.usable) or after.labels != before.labels or \
        after.taints != before.taints or after.devices != before.devices


class PendingSet:
    """Unplaced workloads: those never tried yet (by priority, for the priority gate)
    and those waiting for capacity (woken when devices free up)."""

    def __init__(self) -> None:
        self._fresh: dict[str, int] = {}  # key -> priority, never attempted
        self._prios: list[int] = []  # sorted priorities of _fresh (multiset)
        self.waiting: set[str] = set()  # attempted, unschedulable

    def update(self, obj: JSON) -> None:
        key = _key(obj)
        self.discard(key)
        status = obj.get("status") or {}
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp") or _is_placed(status) or _terminal(status):
            return
        attempted = any(c.get("type") == "Scheduled" for c in status.get("conditions") or ())
        if attempted:
            self.waiting.add(key)
            return
        try:
            prio = GPUWorkload.model_validate({"spec": obj.get("spec") or {}}).spec.priority
        except ValueError:
            return
        self._fresh[key] = prio
        bisect.insort(self._prios, prio)

    def discard(self, key: str) -> None:
        self.waiting.discard(key)
        prio = self._fresh.pop(key, None)
        if prio is not None:
            del self._prios[bisect.bisect_left(self._prios, prio)]

    def higher_fresh(self, key: str, priority: int) -> bool:
        """Is a never-tried workload other than ``key`` of higher priority waiting?"""
        if not self._prios or self._prios[-1] <= priority:
            return False
        return any(p > priority for k, p in self._fresh.items() if k != key)


class PodBook(Protocol):
    """Another placing controller that books pods of its own in this ledger (the
    seed path's pod binding). Its pods are never counted as foreign GPU pods."""

    def owns(self, pod: JSON) -> bool:
        """Is ``pod`` booked by this book (and so not a foreign pod)?"""
        ...

    def rebuild(self, ledger: Ledger, pods: list[JSON]) -> list[str]:
        """Re-book its bound pods in a freshly rebuilt ``ledger`` (called under the
        state lock, after the workloads' placements). Returns problems found."""
        ...

    def wake(self) -> None:
        """Capacity was freed: retry the pods waiting for it (called unlocked)."""
        ...


class PlacementState:
    def __init__(self, default_exposure: DeviceExposure, rng: random.Random | None = None,
                 enqueue_waiting: Callable[[Iterable[str]], None] | None = None,
                 enqueue_on_node: Callable[[str], None] | None = None,
                 stale_after: float = DEFAULT_STALE_AFTER.total_seconds(),
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 pod_books: Sequence[PodBook] = ()) -> None:
        self.stale_after = stale_after
        self.clock = clock
        self._gpunodes: dict[str, JSON] = {}
        self._written: dict[str, int] = {}  # workload key -> rv of our last write
        self._evicting: dict[str, str] = {}  # preempted key -> why, until it is told
        self.lock = threading.RLock()
        self.default_exposure = default_exposure
        self.rng = rng or random.Random()
        self.ledger = Ledger()
        self.snapshot = Snapshot(self.ledger)
        self.scheduler = Scheduler(self.snapshot, self.ledger, rng=self.rng,
                                   default_exposure=default_exposure)
        self.pending = PendingSet()
        self.ready = False
        self._enqueue_waiting = enqueue_waiting or (lambda keys: None)
        self._enqueue_on_node = enqueue_on_node or (lambda node: None)
        self.pod_books = tuple(pod_books)

    # ------------------------------------------------------------------ rebuild

    def rebuild(self, read: Callable[[], Sources]) -> list[str]:
        """The ledger from the caches: committed placements and foreign GPU pods.

        ``read`` lists the caches; it runs under the lock, so an event whose handler
        waits on the lock meanwhile is applied after the rebuild (events are
        idempotent, so one the rebuild already saw changes nothing)."""
        with self.lock:
            nodes, gpunodes, workloads, pods = read()
            parsed = []
            for w in workloads:
                try:
                    parsed.append(GPUWorkload.model_validate(w))
                except ValueError:
                    continue  # invalid specs hold nothing
            ledger, problems = Ledger.rebuild(parsed, pods)
            for book in self.pod_books:
                problems += book.rebuild(ledger, pods)
            self.ledger = ledger
            self.snapshot = Snapshot.build(nodes, [self._view(g) for g in gpunodes], ledger)
            self.scheduler = Scheduler(self.snapshot, ledger, rng=self.rng,
                                       default_exposure=self.default_exposure)
            self.pending = PendingSet()
            for w in workloads:
                self.pending.update(w)
            self._gpunodes = {str(g["metadata"]["name"]): g for g in gpunodes}
            self.ready = True
        for p in problems:
            log.warning("ledger.rebuild.conflict", problem=p)
        log.info("ledger.rebuilt", nodes=len(self.snapshot), workloads=len(ledger.allocations()))
        return problems

    def _view(self, gpunode: JSON) -> JSON:
        """What the scheduler sees of a GPUNode: nothing offered once its agent's
        heartbeat is stale (existing placements stay in the ledger)."""
        if is_stale(gpunode, self.clock(), self.stale_after):
            return stale_view(thaw(gpunode))
        return gpunode

    def refresh_stale(self) -> None:
        """Re-judges heartbeats (time passes without events); call periodically."""
        with self.lock:
            if not self.ready:
                return
            for g in self._gpunodes.values():
                self.snapshot.upsert_gpunode(self._view(g))

    # ------------------------------------------------------------- placing

    def decide(self, w: GPUWorkload) -> Decision:
        """Schedule ``w`` and, if it fits, book it in the ledger (assumed, uncommitted)."""
        with self.lock:
            decision = self.scheduler.schedule(w)
            if decision.ok:
                decision.assume(self.ledger, w)
            return decision

    def commit(self, key: str) -> None:
        with self.lock:
            if self.ledger.allocation(key) is not None:
                self.ledger.commit(key)

    def forget(self, key: str) -> None:
        """Release ``key``'s devices; wakes workloads waiting for capacity."""
        with self.lock:
            released = self.ledger.forget(key)
            waiting = list(self.pending.waiting) if released is not None else []
        if released is not None:
            self._wake(waiting)

    def capacity_freed(self) -> None:
        """Devices were released outside ``forget`` (a pod book's own release):
        wake whatever waits for capacity."""
        with self.lock:
            waiting = list(self.pending.waiting)
        self._wake(waiting)

    def _wake(self, waiting: list[str]) -> None:
        if waiting:
            self._enqueue_waiting(waiting)
        for book in self.pod_books:
            book.wake()

    def _owned(self, pod: JSON) -> bool:
        return any(book.owns(pod) for book in self.pod_books)

    def is_committed(self, key: str) -> bool:
        with self.lock:
            return self.ledger.is_committed(key)

    def held_by(self, key: str) -> bool:
        with self.lock:
            return self.ledger.allocation(key) is not None

    def has_node(self, node: str) -> bool:
        with self.lock:
            return self.snapshot.get(node) is not None

    def uuids(self, node: str, devices: list[int]) -> list[str] | None:
        with self.lock:
            info = self.snapshot.get(node)
            if info is None or not info.has_gpunode:
                return None
            out = [info.devices[d].uuid if d in info.devices else "" for d in devices]
        return out if all(out) else None

    def higher_priority_fresh(self, key: str, priority: int) -> bool:
        with self.lock:
            return self.pending.higher_fresh(key, priority)

    def node_gpus(self) -> tuple[dict[str, int], dict[str, int]]:
        """(total usable, allocated) GPUs per node, for the metrics."""
        with self.lock:
            total, used = {}, {}
            for name in self.snapshot.names:
                t = len(self.ledger.usable(name))
                total[name] = t
                used[name] = max(0, t - self.ledger.free_count(name))
            return total, used

    # --------------------------------------------------------------- events

    def on_node(self, node: JSON) -> None:
        name = str((node.get("metadata") or {}).get("name"))
        with self.lock:
            if not self.ready:
                return
            before = self.snapshot.get(name)
            self.snapshot.upsert_node(node)
            more = _more_room(before, self.snapshot.get(name))
            waiting = list(self.pending.waiting) if more else []
        if more:
            self._wake(waiting)

    def on_node_deleted(self, node: Any) -> None:
        name = str(((getattr(node, "obj", node) or {}).get("metadata") or {}).get("name"))
        with self.lock:
            if not self.ready:
                return
            self.snapshot.remove_node(name)
        self._enqueue_on_node(name)

    def on_gpunode(self, gpunode: JSON) -> None:
        name = str((gpunode.get("metadata") or {}).get("name"))
        with self.lock:
            if not self.ready:
                return
            before = self.snapshot.get(name)
            self._gpunodes[name] = gpunode
            self.snapshot.upsert_gpunode(self._view(gpunode))
            more = _more_room(before, self.snapshot.get(name))
            waiting = list(self.pending.waiting) if more else []
        if more:
            self._wake(waiting)

    def on_gpunode_deleted(self, gpunode: Any) -> None:
        obj = getattr(gpunode, "obj", gpunode) or {}
        with self.lock:
            if self.ready:
                name = str((obj.get("metadata") or {}).get("name"))
                self._gpunodes.pop(name, None)
                self.snapshot.remove_gpunode(name)

    def on_pod(self, pod: JSON) -> None:
        """Count GPU pods the controller did not create (invariant: they take capacity)."""
        if is_controller_pod(pod) or self._owned(pod):
            return
        node = (pod.get("spec") or {}).get("nodeName")
        gpus = pod_gpu_request(pod) if pod_is_active(pod) else 0
        with self.lock:
            if not self.ready:
                return
            had = pod_key(pod) in self.ledger._pods
            if not had and not (node and gpus):
                return
            self.ledger.set_foreign_pod(pod_key(pod), node, gpus)
            freed = had and not gpus
            waiting = list(self.pending.waiting) if freed else []
        if freed:
            self._wake(waiting)

    def on_pod_deleted(self, pod: Any) -> None:
        obj = getattr(pod, "obj", pod) or {}
        with self.lock:
            if not self.ready or pod_key(obj) not in self.ledger._pods:
                return
            self.ledger.remove_foreign_pod(pod_key(obj))
            waiting = list(self.pending.waiting)
        self._wake(waiting)

    def on_workload(self, obj: JSON) -> None:
        """Keeps the pending set current, and adopts a committed placement that this
        ledger does not know (written by a previous leader). Objects older than this
        controller's own last write of them are skipped: they would undo it."""
        with self.lock:
            if not self.ready:
                return
            self.pending.update(obj)
            if not self.is_behind(obj):
                self._adopt(obj)

    def adopt(self, obj: JSON) -> bool:
        """Books the committed placement of ``obj`` if this ledger does not hold it.
        False when it conflicts with what the ledger holds for other workloads."""
        with self.lock:
            return self._adopt(obj)

    def _adopt(self, obj: JSON) -> bool:
        status = obj.get("status") or {}
        key = _key(obj)
        if not _is_placed(status) or _terminal(status) or self.ledger.allocation(key) or \
                key in self._evicting:
            return True
        try:
            w = GPUWorkload.model_validate(obj)
            self.ledger.assume(key, w.status.placements, gpus_per_replica=w.spec.gpus,
                               priority=w.spec.priority, committed=True,
                               check_capacity=False)
            log.info("ledger.adopted", workload=key)
            return True
        except (ValueError, LedgerConflict) as exc:
            log.warning("ledger.adopt.failed", workload=key, error=str(exc))
            return False

    # ------------------------------------------------------- preemption

    def evict(self, key: str, message: str) -> None:
        """Releases ``key``'s devices for a preemptor and marks it to be told so by
        its own reconcile (which is then queued); until then nothing re-adopts it."""
        with self.lock:
            self.ledger.forget(key)
            self._evicting[key] = message
        self._enqueue_waiting([key])

    def eviction(self, key: str) -> str | None:
        with self.lock:
            return self._evicting.get(key)

    def evicted(self, key: str) -> None:
        with self.lock:
            self._evicting.pop(key, None)

    # ------------------------------------------------------- own writes

    def wrote(self, obj: JSON) -> None:
        """Records the resourceVersion of this controller's latest write of ``obj``."""
        rv = _rv(obj)
        if rv:
            with self.lock:
                self._written[_key(obj)] = rv

    def is_behind(self, obj: JSON) -> bool:
        """Is ``obj`` (from the cache) older than this controller's last write of it?
        (The cache lags the API; acting on an older copy would undo the write.)"""
        rv = _rv(obj)
        with self.lock:
            return bool(rv) and rv < self._written.get(_key(obj), 0)

    def on_workload_deleted(self, obj: Any) -> None:
        raw = getattr(obj, "obj", obj) or {}
        key = _key(raw) if raw else str(getattr(obj, "key", ""))
        with self.lock:
            if not self.ready:
                return
            self.pending.discard(key)
        self.forget(key)
