"""The informers' events that keep the placement state in step with the cluster:
Nodes, GPUNodes, ResourceSlices, ResourceClaims, Pods, Jobs and GPUWorkloads.

``CacheEvents`` is the half of ``PlacementState`` that the informers call; the
other half (``placement_state.py``) rebuilds the state and places workloads.
Guarantees, for every handler here:

- **One lock.** It takes the state's lock (``PlacementState.lock``) for what it
  reads and changes, and wakes the waiting workloads (``_wake``, the queue, the
  pod books) only after releasing it.
- **Nothing before the rebuild.** Before ``rebuild`` has run (``ready`` false) an
  event changes nothing (the rebuild reads the caches, which already hold it);
  the only exception is a ResourceSlice, which is recorded so the rebuild sees it.
- **Idempotent.** An event the rebuild already saw, delivered again, changes
  nothing.
- **Wake on more room only.** Waiting workloads are woken when a holder holds
  less than before, is gone, or a node could fit more (heartbeats and status
  churn wake nobody).
- **Holders, whoever made them** (docs/architecture.md, invariant 1): every pod, Job of
  ours and allocated ResourceClaim holds what it holds; the pod books' pods are
  booked by their book. A holder that cannot be read, or holds devices someone
  else holds, is reported once (``on_problem``) and skipped, never raised.
- **Our writes win.** A workload copy older than this controller's own last
  write of it (``WriteTracker``) is not adopted: it would undo the write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from api.v1alpha1.types import GPUWorkload
from controllers.evictions import Evictions
from controllers.node_views import NodeViews
from controllers.pending import PendingSet, is_placed, is_terminal
from controllers.write_tracker import WriteTracker, object_key
from internal.metrics.domain import BAD_OBJECTS, DEVICE_CONFLICTS
from internal.scheduling.jobs import job_uid
from internal.scheduling.ledger import Ledger, LedgerConflict, booking_owner
from internal.scheduling.pods import pod_uid
from internal.scheduling.resourceslices import claim_holder_key, claim_holding
from internal.scheduling.snapshot import Snapshot

log = structlog.get_logger("placement")

JSON = Mapping[str, Any]


def _more_room(before: Any, after: Any) -> bool:
    """Could this node change let a waiting workload fit where it did not before?
    (Heartbeats and status churn must not wake every waiting workload.)"""
    if after is None or not after.ready or after.unschedulable:
        return False
    if before is None or not before.ready or before.unschedulable:
        return True
    return bool(after.usable - before.usable) or after.labels != before.labels or \
        after.taints != before.taints or after.devices != before.devices


def _less(after: Any, before: Any) -> bool:
    """Does the pod hold less now than before?"""
    def size(a: Any) -> int:
        return sum(len(p.devices) for p in a.placements) + sum(a.counted.values())
    return size(after) < size(before) or after.nodes != before.nodes


@dataclass(frozen=True, slots=True)
class _Holder:
    """How the ledger records one kind of holder (pods, our Jobs), by UID."""

    kind: str
    uid: Callable[[JSON], str]
    held: Callable[[Ledger, str], Any]  # what the ledger records for a UID, or None
    sync: Callable[[Ledger, JSON], list[str]]  # record it as it is now: problems
    remove: Callable[[Ledger, str], bool]  # forget it: was it recorded?


_POD = _Holder("Pod", pod_uid, lambda led, uid: led.pod(uid),
               lambda led, pod: led.sync_pod(pod), lambda led, uid: led.remove_pod(uid))
_JOB = _Holder("Job", job_uid, lambda led, uid: led.job(uid),
               lambda led, job: led.sync_job(job), lambda led, uid: led.remove_job(uid))


class CacheEvents:
    """The informer handlers of ``PlacementState`` (a mixin: the attributes and
    methods below are ``PlacementState``'s)."""

    _lock: threading.RLock
    ready: bool
    _ledger: Ledger
    _snapshot: Snapshot
    pending: PendingSet
    nodes: NodeViews
    evictions: Evictions
    writes: WriteTracker
    _reported: set[str]  # pod/Job UIDs whose problem was reported
    _on_problem: Callable[[JSON, str, str], None]
    _enqueue_waiting: Callable[[list[str]], None]
    _enqueue_on_node: Callable[[str], None]
    _wake: Callable[[list[str]], None]
    _owned: Callable[[JSON], bool]
    _booked_elsewhere: Callable[[str], bool]
    forget: Callable[[str], None]

    # ---------------------------------------------------------------- nodes

    def on_node(self, node: JSON) -> None:
        name = str((node.get("metadata") or {}).get("name"))
        with self._lock:
            if not self.ready:
                return
            waiting = self._node_changed(name, lambda: self._snapshot.upsert_node(node))
        if waiting is not None:
            self._wake(waiting)

    def on_node_deleted(self, node: Any) -> None:
        meta = (getattr(node, "obj", node) or {}).get("metadata") or {}
        name = str(meta.get("name"))
        with self._lock:
            # a late delete of an older Node of that name removes nothing
            if not self.ready or not self._snapshot.remove_node(name, str(meta.get("uid") or "")):
                return
        self._enqueue_on_node(name)

    def on_gpunode(self, gpunode: JSON) -> None:
        name = str((gpunode.get("metadata") or {}).get("name"))
        with self._lock:
            if not self.ready:
                return
            waiting = self._node_changed(
                name, lambda: self._snapshot.upsert_gpunode(self.nodes.set_gpunode(gpunode)))
        if waiting is not None:
            self._wake(waiting)

    def on_gpunode_deleted(self, gpunode: Any) -> None:
        obj = getattr(gpunode, "obj", gpunode) or {}
        meta = obj.get("metadata") or {}
        with self._lock:
            name = str(meta.get("name"))
            # a late delete of an older GPUNode of that name drops nothing
            if self.ready and self.nodes.drop_gpunode(name, str(meta.get("uid") or "")):
                self._refresh_node(name)

    def _node_changed(self, name: str, change: Callable[[], None]) -> list[str] | None:
        """Under the lock: applies ``change`` to node ``name`` in the snapshot; the
        workloads to wake (unlocked) when the node could now fit more, else None."""
        before = self._snapshot.get(name)
        change()
        return list(self.pending.waiting) if _more_room(before, self._snapshot.get(name)) \
            else None

    def _refresh_node(self, name: str) -> None:
        """Re-derives ``name``'s devices from its GPUNode and its ResourceSlices."""
        view = self.nodes.view(name)
        if view is not None:
            self._snapshot.upsert_gpunode(view)
        else:
            self._snapshot.remove_gpunode(name)

    # ------------------------------------------------------------------- DRA

    def on_resourceslice(self, rslice: JSON) -> None:
        """A ResourceSlice of the driver: the node's devices come from its slices."""
        slices = self.nodes.slices
        if slices is None:
            return
        with self._lock:
            node = slices.upsert(rslice)
            if not self.ready or node is None:
                return
            waiting = self._node_changed(node, lambda: self._refresh_node(node))
        if waiting is not None:
            self._wake(waiting)

    def on_resourceslice_deleted(self, rslice: Any) -> None:
        obj = getattr(rslice, "obj", rslice) or {}
        slices = self.nodes.slices
        if slices is None:
            return
        with self._lock:
            node = slices.remove(obj)
            if self.ready and node is not None:
                self._refresh_node(node)

    def on_claim(self, claim: JSON) -> None:
        """An allocated ResourceClaim holds its devices, whoever allocated it
        (docs/architecture.md, invariant 1): kube-scheduler's claims keep ours off
        their GPUs."""
        if self.nodes.slices is None:
            return
        key = claim_holder_key(str((claim.get("metadata") or {}).get("uid") or ""))
        with self._lock:
            if not self.ready:
                return
            before = self._ledger.holding(key)
            problems = self._sync_claim(self._ledger, claim)
            after = self._ledger.holding(key)
            freed = before is not None and (after is None or _less(after, before))
            waiting = list(self.pending.waiting) if freed else []
        for p in problems:
            conflict = "also held by" in p
            if conflict:
                DEVICE_CONFLICTS.inc()
            else:
                BAD_OBJECTS.labels("ResourceClaim").inc()
            log.warning("ledger.claim.problem", problem=p)
            self._on_problem(claim, "DeviceConflict" if conflict else "UnreadableClaim", p)
        if freed:
            self._wake(waiting)

    def on_claim_deleted(self, claim: Any) -> None:
        obj = getattr(claim, "obj", claim) or {}
        key = claim_holder_key(str((obj.get("metadata") or {}).get("uid") or ""))
        with self._lock:
            if not self.ready or not self._ledger.remove_holder(key):
                return
            waiting = list(self.pending.waiting)
        self._wake(waiting)

    def _sync_claim(self, ledger: Ledger, claim: JSON) -> list[str]:
        """Records in ``ledger`` what ``claim`` holds now (under the lock)."""
        key = claim_holder_key(str((claim.get("metadata") or {}).get("uid") or ""))
        slices = self.nodes.slices
        assert slices is not None
        return ledger.sync(key, lambda: claim_holding(claim, slices), key)

    # ----------------------------------------------------------- pods, Jobs

    def on_pod(self, pod: JSON) -> None:
        """Every pod holds what it holds (docs/architecture.md, invariant 1), whoever
        made it;
        pod books' pods are booked by their book."""
        if not self._owned(pod):
            self._sync_holder(pod, _POD)

    def on_pod_deleted(self, pod: Any) -> None:
        self._holder_gone(getattr(pod, "obj", pod) or {}, _POD)

    def on_job(self, job: JSON) -> None:
        """An unfinished Job of ours holds what its template names until it is gone
        (``internal/scheduling/jobs.py``): the Job controller may still make a pod."""
        self._sync_holder(job, _JOB)

    def on_job_deleted(self, job: Any) -> None:
        self._holder_gone(getattr(job, "obj", job) or {}, _JOB)

    def _sync_holder(self, obj: JSON, holder: _Holder) -> None:
        """Records what ``obj`` (a pod, a Job) holds now; reports its problems once;
        wakes the waiting workloads when it holds less than before."""
        kind, uid = holder.kind, holder.uid(obj)
        with self._lock:
            if not self.ready:
                return
            before = holder.held(self._ledger, uid)
            problems = holder.sync(self._ledger, obj)
            after = holder.held(self._ledger, uid)
            freed = before is not None and (after is None or _less(after, before))
            waiting = list(self.pending.waiting) if freed else []
            report = bool(problems) and uid not in self._reported
            if report:
                self._reported.add(uid)
            elif not problems:
                self._reported.discard(uid)
        if report:
            self._report(obj, kind, problems)
        if freed:
            self._wake(waiting)

    def _holder_gone(self, obj: JSON, holder: _Holder) -> None:
        uid = holder.uid(obj)
        with self._lock:
            self._reported.discard(uid)
            if not self.ready or not holder.remove(self._ledger, uid):
                return
            waiting = list(self.pending.waiting)
        self._wake(waiting)

    def _report(self, obj: JSON, kind: str, problems: list[str]) -> None:
        for p in problems:
            bad = "also held by" not in p
            if bad:
                BAD_OBJECTS.labels(kind).inc()
            else:
                DEVICE_CONFLICTS.labels("reported").inc()
            log.warning("ledger.pod.problem", problem=p)
            self._on_problem(obj, "BadAnnotation" if bad else "DeviceConflict", p)

    # ------------------------------------------------------------ workloads

    def _track_pending(self, obj: JSON) -> None:
        """Under the lock: ``obj`` waits for capacity unless the ledger books it."""
        key = object_key(obj)
        if self._ledger.allocation(key) is not None:
            self.pending.discard(key)
        else:
            self.pending.update(obj)

    def on_workload(self, obj: JSON) -> None:
        """Keeps the pending set current, and adopts a committed placement that this
        ledger does not know (written by a previous leader). Objects older than this
        controller's own last write of them are skipped: they would undo it."""
        victims: list[str] = []
        with self._lock:
            if not self.ready:
                return
            if not self.writes.is_behind(obj):
                _, victims = self._adopt(obj)
            self._track_pending(obj)
        if victims:
            self._enqueue_waiting(victims)

    def adopt(self, obj: JSON) -> bool:
        """Books the committed placement of ``obj`` if this ledger does not hold it.
        False when it conflicts with what the ledger holds for other owners (running
        pods win)."""
        with self._lock:
            ok, victims = self._adopt(obj)
        if victims:
            self._enqueue_waiting(victims)
        return ok

    def _adopt(self, obj: JSON) -> tuple[bool, list[str]]:
        """Under the lock: (adopted or nothing to adopt, the victims of its
        nomination to enqueue once the lock is released)."""
        status = obj.get("status") or {}
        key = object_key(obj)
        meta = obj.get("metadata") or {}
        if not is_placed(status) or is_terminal(status) or self._ledger.allocation(key) or \
                self.evictions.is_evicting(key) or meta.get("deletionTimestamp"):
            return True, []
        try:
            w = GPUWorkload.model_validate(obj)
            a = self._ledger.assume(key, w.status.placements, gpus_per_replica=w.spec.gpus,
                                   priority=w.spec.priority, committed=True,
                                   check_capacity=False, owner=booking_owner(w),
                                   uid=w.metadata.uid or "", overlap=w.status.nominated_over)
            log.info("ledger.adopted", workload=key, nominated_over=w.status.nominated_over)
            if not a.overlap:
                return True, []
            self.evictions.block(key)
            return True, self.evictions.resume(self._ledger, a, self._booked_elsewhere)
        except (ValueError, LedgerConflict) as exc:
            log.warning("ledger.adopt.failed", workload=key, error=str(exc))
            return False, []

    def on_workload_deleted(self, obj: Any) -> None:
        """The workload is gone: its booking, pending entry and write record go.
        Identity is the UID: a late delete of an older object of the same name (the
        reconciler reads the cache, which shows the new object before this handler
        runs) releases nothing of the new object's; only the old one's eviction is
        taken in (its preemptors stop waiting for it)."""
        raw = getattr(obj, "obj", obj) or {}
        key = object_key(raw) if raw else str(getattr(obj, "key", ""))
        uid = str((raw.get("metadata") or {}).get("uid") or "")
        with self._lock:
            if not self.ready:
                return
            booked = self._ledger.allocation(key)
            late = bool(uid) and booked is not None and bool(booked.uid) and booked.uid != uid
            waiting = self.evictions.acknowledge(key) if late else []
        if late:
            log.info("workload.delete.stale", workload=key, uid=uid, booked_uid=booked.uid)
            if waiting:
                self._enqueue_waiting(waiting)
            return
        with self._lock:
            if not self.ready:
                return
            self.pending.discard(key)
            self.writes.forget(key)
            waiting = self.evictions.acknowledge(key)
        if waiting:
            self._enqueue_waiting(waiting)
        with self._lock:
            self.evictions.stop_waiting(key)
        self.forget(key)
