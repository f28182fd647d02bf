"""The informers' events that keep the placement state in step with the cluster:
Nodes, GPUNodes, ResourceSlices, ResourceClaims, Pods, Jobs and GPUWorkloads.

``CacheEvents`` is the informers' handlers of the placement state, composed onto it
as client-go composes ``ResourceEventHandlerFuncs`` onto an informer: it holds the
state (``PlacementState.events``), reads each object, applies the change under
the cache's lock (it is the cache's event side: ``_set_node``, ``_set_holder``...;
a workload's through the state's ``set_workload`` and ``workload_gone``), and then
reports problems and wakes the waiting. Guarantees, for every handler here:

- **One lock, one section per event.** A change takes the cache's lock once, for
  what it reads and changes (a pod's holding and its requests together); the
  waiting workloads (the queue, the pod books) are woken only after it is
  released (``PlacementState.wake_if``).
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
- **A node reporting too much is refused, said once** (``bounds.py``): a Warning
  Event ``TooManyGPUs`` on the Node when it is refused (or refused for another
  reason), a log line and ``gpu_orchestrator_bad_objects_total{kind="Node"}``; not
  once per decision, nor per heartbeat of the same report.
- **Our writes win.** A workload copy older than this controller's own last
  write of it (``OwnWrites.is_behind``) is not adopted: it would undo the write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from internal.metrics.domain import BAD_OBJECTS, DEVICE_CONFLICTS
from internal.objects import JSON, object_key
from internal.scheduling.bounds import REFUSED_REASON
from internal.scheduling.jobs import job_uid
from internal.scheduling.ledger import Ledger
from internal.scheduling.ledger_core import is_conflict
from internal.scheduling.pods import pod_uid
from internal.scheduling.resourceslices import claim_holder_key

if TYPE_CHECKING:
    from controllers.placement.state import PlacementState

log = structlog.get_logger("placement")



def more_room(before: Any, after: Any) -> bool:
    """Could this node change let a waiting workload fit where it did not before?
    (Heartbeats and status churn must not wake every waiting workload.)"""
    if after is None or not after.ready or after.unschedulable:
        return False
    if before is None or not before.ready or before.unschedulable:
        return True
    return bool(after.usable - before.usable) or after.labels != before.labels or \
        after.taints != before.taints or after.devices != before.devices or \
        after.allocatable != before.allocatable


def holds_less(after: Any, before: Any) -> bool:
    """Does the pod hold less now than before?"""
    def size(a: Any) -> int:
        return sum(len(p.devices) for p in a.placements) + sum(a.counted.values())
    return size(after) < size(before) or after.nodes != before.nodes


@dataclass(frozen=True, slots=True)
class Holder:
    """How the ledger records one kind of holder (pods, our Jobs), by UID."""

    kind: str
    uid: Callable[[JSON], str]
    held: Callable[[Ledger, str], Any]  # what the ledger records for a UID, or None
    sync: Callable[[Ledger, JSON], list[str]]  # record it as it is now: problems
    remove: Callable[[Ledger, str], bool]  # forget it: was it recorded?


POD = Holder("Pod", pod_uid, lambda led, uid: led.pod(uid),
               lambda led, pod: led.sync_pod(pod), lambda led, uid: led.remove_pod(uid))
JOB = Holder("Job", job_uid, lambda led, uid: led.job(uid),
               lambda led, job: led.sync_job(job), lambda led, uid: led.remove_job(uid))


class CacheEvents:
    """The informer handlers of a ``PlacementState`` (``state.events``): each reads
    the object, asks the state to apply the change, then reports and wakes."""

    def __init__(self, state: PlacementState,
                 on_problem: Callable[[JSON, str, str], None] | None = None,
                 enqueue_on_node: Callable[[str], None] | None = None) -> None:
        self._state = state
        self._on_problem = on_problem or (lambda obj, reason, message: None)
        self._enqueue_on_node = enqueue_on_node or (lambda node: None)
        self._reported: set[str] = set()  # pod/Job UIDs whose problem was reported
        self._lock = threading.Lock()  # guards _reported

    # ---------------------------------------------------------------- nodes

    def on_node(self, node: JSON) -> None:
        self._state.wake_if(self._set_node(node))
        self.report_refused()

    def on_node_deleted(self, node: Any) -> None:
        meta = (getattr(node, "obj", node) or {}).get("metadata") or {}
        name = str(meta.get("name"))
        # a late delete of an older Node of that name removes nothing
        if self._remove_node(name, str(meta.get("uid") or "")):
            self._enqueue_on_node(name)

    def on_gpunode(self, gpunode: JSON) -> None:
        self._state.wake_if(self._set_gpunode(gpunode))
        self.report_refused()

    def on_gpunode_deleted(self, gpunode: Any) -> None:
        meta = (getattr(gpunode, "obj", gpunode) or {}).get("metadata") or {}
        # a late delete of an older GPUNode of that name drops nothing
        self._remove_gpunode(str(meta.get("name")), str(meta.get("uid") or ""))
        self.report_refused()  # its Node's allocatable counts again

    def report_refused(self) -> None:
        """Reports each node refused since the last call, once (``bounds.py``)."""
        for node, message in self._state.take_refusals():
            BAD_OBJECTS.labels("Node").inc()
            log.warning("node.refused", node=node["metadata"]["name"], message=message)
            self._on_problem(node, REFUSED_REASON, message)

    # ------------------------------------------------------------------- DRA

    def on_resourceslice(self, rslice: JSON) -> None:
        """A ResourceSlice of the driver: the node's devices come from its slices."""
        self._state.wake_if(self._set_slice(rslice))
        self.report_refused()

    def on_resourceslice_deleted(self, rslice: Any) -> None:
        self._remove_slice(getattr(rslice, "obj", rslice) or {})
        self.report_refused()

    def on_claim(self, claim: JSON) -> None:
        """An allocated ResourceClaim holds its devices, whoever allocated it
        (docs/architecture.md, invariant 1): kube-scheduler's claims keep ours off
        their GPUs."""
        changed = self._set_claim(claim)
        if changed is None:
            return
        problems, waiting = changed
        for p in problems:
            conflict = is_conflict(p)
            if conflict:
                DEVICE_CONFLICTS.labels("reported").inc()
            else:
                BAD_OBJECTS.labels("ResourceClaim").inc()
            log.warning("ledger.claim.problem", problem=p)
            self._on_problem(claim, "DeviceConflict" if conflict else "UnreadableClaim", p)
        self._state.wake_if(waiting)

    def on_claim_deleted(self, claim: Any) -> None:
        obj = getattr(claim, "obj", claim) or {}
        key = claim_holder_key(str((obj.get("metadata") or {}).get("uid") or ""))
        self._state.wake_if(self._remove_holder_key(key))

    # ----------------------------------------------------------- pods, Jobs

    def on_pod(self, pod: JSON) -> None:
        """Every pod holds what it holds (docs/architecture.md, invariant 1), whoever
        made it; pod books' pods are booked by their book. Every pod's requests
        count on its node (node fit, ``nodeusage.py``), GPUs or not: one section."""
        if self._state.owned(pod):
            self._set_holder(pod, None)  # its requests only
        else:
            self._sync_holder(pod, POD)

    def on_pod_deleted(self, pod: Any) -> None:
        self._holder_gone(getattr(pod, "obj", pod) or {}, POD)

    def on_job(self, job: JSON) -> None:
        """An unfinished Job of ours holds what its template names until it is gone
        (``internal/scheduling/jobs.py``): the Job controller may still make a pod."""
        self._sync_holder(job, JOB)

    def on_job_deleted(self, job: Any) -> None:
        self._holder_gone(getattr(job, "obj", job) or {}, JOB)

    def _sync_holder(self, obj: JSON, holder: Holder) -> None:
        """Records what ``obj`` (a pod, a Job) holds now; reports its problems once;
        wakes the waiting workloads when it holds less than before."""
        uid = holder.uid(obj)
        changed = self._set_holder(obj, holder)
        if changed is None:
            return
        problems, waiting = changed
        with self._lock:
            report = bool(problems) and uid not in self._reported
            if report:
                self._reported.add(uid)
            elif not problems:
                self._reported.discard(uid)
        if report:
            self._report(obj, holder.kind, problems)
        self._state.wake_if(waiting)

    def _holder_gone(self, obj: JSON, holder: Holder) -> None:
        uid = holder.uid(obj)
        with self._lock:
            self._reported.discard(uid)
        self._state.wake_if(self._remove_holder(uid, holder))

    def _report(self, obj: JSON, kind: str, problems: list[str]) -> None:
        for p in problems:
            bad = not is_conflict(p)
            if bad:
                BAD_OBJECTS.labels(kind).inc()
            else:
                DEVICE_CONFLICTS.labels("reported").inc()
            log.warning("ledger.pod.problem", problem=p)
            self._on_problem(obj, "BadAnnotation" if bad else "DeviceConflict", p)

    # ------------------------------------------- the changes, under the lock
    # Each applies one change to the cache under its lock (this module is the
    # cache's event side: it touches the cache's private parts, as ``state`` does)
    # and returns what to wake (None: nothing, or not ready: the rebuild reads it).

    def _set_node(self, node: JSON) -> list[str] | None:
        c = self._state
        name = str((node.get("metadata") or {}).get("name"))
        with c._lock:
            return self._node_changed(name, lambda: c._snapshot.upsert_node(node)) \
                if c.ready else None

    def _remove_node(self, name: str, uid: str) -> bool:
        """Drops node ``name`` unless it is another object (``uid``); dropped?"""
        c = self._state
        with c._lock:
            return c.ready and c._snapshot.remove_node(name, uid)

    def _set_gpunode(self, gpunode: JSON) -> list[str] | None:
        c = self._state
        name = str((gpunode.get("metadata") or {}).get("name"))
        with c._lock:
            if not c.ready:
                return None
            return self._node_changed(
                name, lambda: c._snapshot.upsert_gpunode(c._nodes.set_gpunode(gpunode)))

    def _remove_gpunode(self, name: str, uid: str) -> None:
        c = self._state
        with c._lock:
            if c.ready and c._nodes.drop_gpunode(name, uid):
                self._refresh_node(name)

    def _set_slice(self, rslice: JSON) -> list[str] | None:
        """Records a ResourceSlice (before the rebuild too: the rebuild reads it)."""
        c = self._state
        slices = c._nodes.slices
        if slices is None:
            return None
        with c._lock:
            node = slices.upsert(rslice)
            if not c.ready or node is None:
                return None
            return self._node_changed(node, lambda: self._refresh_node(node))

    def _remove_slice(self, rslice: JSON) -> None:
        c = self._state
        slices = c._nodes.slices
        if slices is None:
            return
        with c._lock:
            node = slices.remove(rslice)
            if c.ready and node is not None:
                self._refresh_node(node)

    def _node_changed(self, name: str, change: Callable[[], None]) -> list[str] | None:
        """Under the lock: applies ``change`` to node ``name`` in the snapshot; the
        workloads to wake (unlocked) when the node could now fit more, else None."""
        c = self._state
        before = c._snapshot.get(name)
        change()
        return list(c.pending.waiting) if more_room(before, c._snapshot.get(name)) \
            else None

    def _refresh_node(self, name: str) -> None:
        """Re-derives ``name``'s devices from its GPUNode and its ResourceSlices."""
        c = self._state
        view = c._nodes.view(name)
        if view is not None:
            c._snapshot.upsert_gpunode(view)
        else:
            c._snapshot.remove_gpunode(name)

    def _set_claim(self, claim: JSON) -> tuple[list[str], list[str] | None] | None:
        """Records what an allocated ResourceClaim holds: (problems, what to wake);
        None when DRA is off or before the rebuild."""
        c = self._state
        if c._nodes.slices is None:
            return None
        key = claim_holder_key(str((claim.get("metadata") or {}).get("uid") or ""))
        with c._lock:
            if not c.ready:
                return None
            before = c._ledger.holding(key)
            problems = c._sync_claim(c._ledger, claim)
            after = c._ledger.holding(key)
            freed = before is not None and (after is None or holds_less(after, before))
            return problems, list(c.pending.waiting) if freed else None

    def _remove_holder_key(self, key: str) -> list[str] | None:
        """Forgets the holder ``key`` (a claim); what to wake if it held anything."""
        c = self._state
        with c._lock:
            if not c.ready or not c._ledger.remove_holder(key):
                return None
            return list(c.pending.waiting)

    def _set_holder(self, obj: JSON, holder: Holder | None
                   ) -> tuple[list[str], list[str] | None] | None:
        """Records what ``obj`` (a pod, a Job) holds now, and a pod's requests on its
        node (node fit, whoever made it), in one section: (problems, what to wake
        when it holds less than before); None before the rebuild, or for a pod a pod
        book holds (``holder`` None: only its requests count here)."""
        c = self._state
        with c._lock:
            if not c.ready:
                return None
            if holder is None or holder.kind == "Pod":
                c._snapshot.usage.set_pod(obj)
            if holder is None:
                return None
            uid = holder.uid(obj)
            before = holder.held(c._ledger, uid)
            problems = holder.sync(c._ledger, obj)
            after = holder.held(c._ledger, uid)
            freed = before is not None and (after is None or holds_less(after, before))
            return problems, list(c.pending.waiting) if freed else None

    def _remove_holder(self, uid: str, holder: Holder) -> list[str] | None:
        """Forgets the pod or Job ``uid`` (a pod's requests too); what to wake if it
        held anything."""
        c = self._state
        with c._lock:
            if not c.ready:
                return None
            if holder.kind == "Pod":
                c._snapshot.usage.remove_pod(uid)
            if not holder.remove(c._ledger, uid):
                return None
            return list(c.pending.waiting)

    # ------------------------------------------------------------ workloads

    def on_workload(self, obj: JSON) -> None:
        """Keeps the pending set current, and adopts a committed placement that the
        ledger does not know (written by a previous leader). Objects older than this
        controller's own last write of them are skipped: they would undo it."""
        self._state.set_workload(obj)

    def on_workload_deleted(self, obj: Any) -> None:
        """The workload is gone: its booking, pending entry and write record go, if
        they are this object's (identity is the UID: ``PlacementState.workload_gone``)."""
        raw = getattr(obj, "obj", obj) or {}
        key = object_key(raw) if raw else str(getattr(obj, "key", ""))
        self._state.workload_gone(key, str((raw.get("metadata") or {}).get("uid") or ""))
