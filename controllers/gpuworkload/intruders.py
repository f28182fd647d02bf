"""Pods that gave themselves devices: evicted (``--evict-conflicting-pods``, on by
default in the manager).

Only the controller (its children), the webhook and the pod binding (the seed path's
pods, booked by their pod book) give a pod the ``gpu.orchestrator.dev/devices``
annotation. The ``pod-devices`` admission policy refuses every other pod that sets it
(api/v1alpha1/pod_devices.py); on a cluster without the policy such a pod slips
through, and the ledger, which follows every pod that names devices (docs/architecture.md,
invariant 1), would book them for it: a tenant could reserve free GPUs, or run on
another's. This handler asks such a pod to go, through the Eviction API (so a
PodDisruptionBudget holds), once per pod, with an ``UnauthorizedDevices`` Warning
Event saying why. Its devices stay held until it is gone (asking is not freeing).

A pod that only requests ``nvidia.com/gpu`` (the device plugin's, counted) is
evicted when the ledger says it *over-commits* its node (``Allocation.overcommit``:
its arrival took the named + counted GPUs there above the node's devices, so two
holders share a GPU, e.g. kube-scheduler placed it beside our children, or it was
forced there by ``spec.nodeName``), with a ``DeviceConflict`` Warning Event (the
placement state's handler has said so already) and
``gpu_orchestrator_device_conflicts_total{action="evicted"}`` (``evict_failed``
when the Eviction is refused, a PodDisruptionBudget). A pod is asked to go as soon as
it is seen, usually before it runs: kube-apiserver evicts a Pending pod whatever its
PodDisruptionBudget says (no disruption yet); a budget holds a running one, found
there by the sweep (e.g. after a manager's restart), and a refused pod is asked again
on its next update.

Not evicted: pods of a GPUWorkload (``is_controller_pod``), pods a pod book owns
(the seed path), pods outside the manager's ``--namespaces``, pods that only
request ``nvidia.com/gpu`` where their node has room, and *orphans*: a pod our
controller created is ours whoever owns it now. ``kubectl delete gw w
--cascade=orphan`` takes its ownerReference away, and it runs on with
its devices (docs/architecture.md); the ledger still says whose pod it was booked
as (``Allocation.child_of``, ``booked_child`` here), and an orphan gets one Normal
``Orphaned`` Event saying it is kept. A pod the ledger never booked as a workload's
is a forgery, whatever labels it copies: its Warning says so.

| the pod (bound, unfinished)                     | outcome                          |
|-------------------------------------------------|----------------------------------|
| a GPUWorkload's child, or a pod book's          | nothing                          |
| naming devices, booked as a workload's (orphan) | ``Orphaned`` Event, once; kept   |
| naming devices, anything else (forged)          | ``UnauthorizedDevices``, evicted |
| not naming devices, over-committing its node    | ``DeviceConflict``, evicted      |

Threads: the pods' handler is ``inline`` (``handler()``): each pod event is looked at
on the thread that delivers it, with checks that read only the pod (bound, unfinished,
nobody's of ours, naming devices or requesting GPUs), so the events of our own pods,
nearly all of them, wake no thread. A pod that passes goes to the evictor's one
long-lived worker, one entry per UID (latest object wins), which asks the ledger
(``over_commits``, ``booked_child``: they take the placement lock, which no watch's
thread may wait on) and sends the Event and the eviction. Before, every pod event woke
the handler's own thread, and every eviction started a thread of its own.

The placement state's handler of the same event may not have reached the ledger when
the worker asks (its event gate defers it while a scheduling pass holds the lock,
controllers/placement/event_gate.py): the ledger then holds nothing for the pod
(``over_commits`` None), which is not "no over-commit", so the worker asks again
``RECHECK_AFTER`` later, from its own wait (no thread), up to ``RECHECKS`` times, then
leaves the pod to its next event or the sweep. Before, it took the pod's verdict for
"" and dropped it: an over-committing pod waited for its next update (the kubelet's,
once it ran) or the sweep.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import structlog

from api.v1alpha1.keys import DEVICES_ANNOTATION, WORKLOAD_LABEL, WORKLOAD_UID_LABEL
from internal.metrics.domain import DEVICE_CONFLICTS
from internal.objects import JSON, object_key
from internal.scheduling.pods import (
    is_controller_pod,
    pod_gpu_request,
    pod_is_active,
    pod_uid,
)
from runtime import ApiError, FuncHandler, NotFound

if TYPE_CHECKING:
    from controllers.placement.state import PlacementState

log = structlog.get_logger("controllers.gpuworkload.intruders")

REASON = "UnauthorizedDevices"
OVERCOMMIT_REASON = "DeviceConflict"
#: how often every pod is looked at again (``sweep``): those already there when the
#: ledger became ready (a manager's start) had their events before it
SWEEP_PERIOD = 10.0
#: a pod the ledger has not booked yet (its event still on its way to the placement
#: state) is asked again this many seconds later, up to ``RECHECKS`` times; after
#: that its next event or the sweep asks
RECHECK_AFTER = 0.25
RECHECKS = 12
#: seconds an eviction may take, retries included (a refusal is asked again later)
EVICT_DEADLINE = 5.0
ORPHANED = "Orphaned"


def names_devices_itself(pod: JSON, owned: Callable[[JSON], bool]) -> bool:
    """A bound, unfinished pod, not being deleted, that names devices nobody of
    ours gave it."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if not spec.get("nodeName") or meta.get("deletionTimestamp") or not pod_is_active(pod):
        return False
    if not str((meta.get("annotations") or {}).get(DEVICES_ANNOTATION) or "").strip():
        return False
    return not is_controller_pod(pod) and not owned(pod)


def over_commits(state: PlacementState | None, pod: JSON) -> str | None:
    """Why ``state``'s ledger says ``pod`` over-commits its node ("": it does not;
    None: it has not booked the pod, or no state is ready)."""
    held = state.ledger_read("pod")(pod_uid(pod)) if state is not None else None
    return held.overcommit if held is not None else None


def evictable(pod: JSON, owned: Callable[[JSON], bool]) -> bool:
    """A bound, unfinished pod, not being deleted, that nobody of ours made."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if not spec.get("nodeName") or meta.get("deletionTimestamp") or not pod_is_active(pod):
        return False
    return not is_controller_pod(pod) and not owned(pod)


def booked_child(state: PlacementState | None, pod: JSON) -> str:
    """The workload attempt whose pod ``state``'s ledger booked ``pod`` as ("": none,
    or no state ready)."""
    held = state.ledger_read("pod")(pod_uid(pod)) if state is not None else None
    return held.child_of if held is not None else ""


class IntruderEvictor:
    """Informer handler: once per UID, keeps each orphan ``names_devices_itself``
    finds (an Event) and evicts every other such pod."""

    def __init__(self, client: Any, recorder: Any, owned: Callable[[JSON], bool],
                 active: Callable[[], bool], namespaces: frozenset[str] = frozenset(),
                 booked_child: Callable[[JSON], str] = lambda pod: "",
                 over_commits: Callable[[JSON], str | None] = lambda pod: "") -> None:
        self.client, self.recorder = client, recorder
        self.owned, self.active, self.namespaces = owned, active, namespaces
        #: the workload attempt whose pod the ledger booked this pod as ("": none)
        self.booked_child = booked_child
        #: why the ledger says this pod over-commits its node ("": it does not;
        #: None: the ledger has not booked it yet, asked again in ``RECHECK_AFTER``)
        self.over_commits = over_commits
        self._asked: set[str] = set()
        #: UIDs whose eviction failed: asked again on their next update, not by a sweep
        self._refused: set[str] = set()
        self._lock = threading.Lock()
        #: UID -> (the latest pod object, asked on an update, rechecks so far), for
        #: the worker, in order
        self._queue: dict[str, tuple[JSON, bool, int]] = {}
        #: UID -> (when, pod, asked on an update, rechecks so far): to ask again, the
        #: ledger had not booked the pod
        self._later: dict[str, tuple[float, JSON, bool, int]] = {}
        self._wake = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None
        self._stopped = False

    def handler(self) -> FuncHandler:
        """The pods' informer handler: inline (see the module's "Threads")."""
        return FuncHandler(self.on_pod, self.on_pod, self.on_pod_deleted,
                           name="intruders", inline=True)

    def on_pod(self, *args: Any) -> None:
        self._offer(args[-1], again=True)

    def sweep(self, pods: Iterable[JSON]) -> None:
        """Looks at every pod again (a leader's Ticker, every ``SWEEP_PERIOD``): a
        pod whose events all came before the ledger was ready would otherwise wait
        for its next update, and on a cluster without GPUWorkloads no reconcile
        ever builds the ledger (the Ticker does). A pod whose eviction was refused
        (a PodDisruptionBudget) is asked again on its next update only."""
        for pod in pods:
            self._offer(pod, again=False)

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the worker once it has looked at what is queued (tests)."""
        with self._lock:
            self._stopped = True
            self._wake.notify()
            worker = self._worker
        if worker is not None:
            worker.join(timeout)

    def _candidate(self, pod: JSON) -> bool:
        """What the worker may have to act on, from the pod alone (no ledger, no
        wait: called on the watch's thread)."""
        meta = pod.get("metadata") or {}
        if not self.active() or (self.namespaces and
                                 (meta.get("namespace") or "default") not in self.namespaces):
            return False
        if not evictable(pod, self.owned):
            return False
        return bool(str((meta.get("annotations") or {}).get(DEVICES_ANNOTATION) or "").strip()
                    or pod_gpu_request(pod))

    def _offer(self, pod: JSON, again: bool) -> None:
        if not self._candidate(pod):
            return
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        with self._lock:
            if self._stopped or uid in self._asked or (not again and uid in self._refused):
                return
            queued = self._queue.pop(uid, None)
            self._later.pop(uid, None)  # this newer object is asked instead
            self._queue[uid] = (pod, again or (queued is not None and queued[1]), 0)
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, daemon=True,
                                                name="intruder-evictor")
                self._worker.start()
            self._wake.notify()

    def _work(self) -> None:
        """The one worker: the ledger's verdict, then the Event and the eviction, one
        pod at a time (an eviction is bounded by ``EVICT_DEADLINE``); a recheck is
        queued when it is due."""
        while True:
            with self._lock:
                while not self._due() and not self._stopped:
                    self._wake.wait(self._until_next())
                if not self._queue:
                    return
                uid = next(iter(self._queue))
                pod, again, rechecks = self._queue.pop(uid)
            try:
                self._look(pod, again, rechecks)
            except Exception:  # one pod's failure stops neither the worker nor the rest
                log.exception("pod.intruder.look_failed", pod=object_key(pod))

    def _due(self) -> bool:
        """Under ``_lock``: queues the rechecks that are due (a pod queued since is
        asked as it is now instead); whether anything is queued."""
        now = time.monotonic()
        for uid, (when, pod, again, rechecks) in list(self._later.items()):
            if when <= now:
                del self._later[uid]
                self._queue.setdefault(uid, (pod, again, rechecks))
        return bool(self._queue)

    def _until_next(self) -> float | None:
        """Under ``_lock``: seconds until the next recheck is due (None: none)."""
        if not self._later:
            return None
        return max(0.0, min(when for when, *_ in self._later.values()) - time.monotonic())

    def _recheck(self, uid: str, pod: JSON, again: bool, rechecks: int) -> None:
        """The ledger has not booked ``pod`` yet: asked again in ``RECHECK_AFTER``,
        up to ``RECHECKS`` times (then its next event, or the sweep)."""
        with self._lock:
            if not self._stopped and rechecks < RECHECKS and uid not in self._queue:
                self._later[uid] = (time.monotonic() + RECHECK_AFTER, pod, again, rechecks + 1)

    def _look(self, pod: JSON, again: bool, rechecks: int = 0) -> None:
        meta = pod.get("metadata") or {}
        ns, uid = meta.get("namespace") or "default", str(meta.get("uid") or "")
        if not self.active() or (self.namespaces and ns not in self.namespaces):
            return
        forged = names_devices_itself(pod, self.owned)
        over = "" if forged or not evictable(pod, self.owned) or not pod_gpu_request(pod) \
            else self.over_commits(pod)
        if over is None:  # its event has not reached the ledger yet: asked again
            self._recheck(uid, pod, again, rechecks)
            return
        if over and self.booked_child(pod):  # an orphan of ours: kept, as above
            over = ""
        if not forged and not over:
            return
        with self._lock:
            if uid in self._asked or (not again and uid in self._refused):
                return
            self._asked.add(uid)
            self._refused.discard(uid)
        if forged and self.booked_child(pod):
            self._keep_orphan(pod)
            return
        self._evict(pod, over)

    def on_pod_deleted(self, pod: Any) -> None:
        uid = str(((getattr(pod, "obj", pod) or {}).get("metadata") or {}).get("uid") or "")
        with self._lock:
            self._asked.discard(uid)
            self._refused.discard(uid)
            self._queue.pop(uid, None)
            self._later.pop(uid, None)

    def _keep_orphan(self, pod: JSON) -> None:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        ns = meta.get("namespace") or "default"
        workload = f"{ns}/{labels[WORKLOAD_LABEL]}" if labels.get(WORKLOAD_LABEL) else \
            f"of UID {labels.get(WORKLOAD_UID_LABEL) or self.booked_child(pod)}"
        devices = (meta.get("annotations") or {}).get(DEVICES_ANNOTATION)
        node = (pod.get("spec") or {}).get("nodeName")
        log.info("pod.orphan.kept", pod=object_key(pod), workload=workload, devices=devices)
        self.recorder.normal(pod, ORPHANED, (
            f"its GPUWorkload {workload} was deleted with --cascade=orphan: gpu-orchestrator "
            f"created this pod, so it runs on and keeps its devices {devices} on {node} "
            "until it ends or is deleted"))

    def _evict(self, pod: JSON, over: str = "") -> None:
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace") or "default", meta.get("name")
        devices = (meta.get("annotations") or {}).get(DEVICES_ANNOTATION)
        if over:
            self.recorder.warning(pod, OVERCOMMIT_REASON, (
                f"{over}: this pod came last, and its GPUs are ones another holder "
                "uses; evicting the pod (--evict-conflicting-pods)"))
        else:
            self.recorder.warning(pod, REASON, (
                f"annotation {DEVICES_ANNOTATION}={devices} was not set by gpu-orchestrator: "
                "the pod is no GPUWorkload's, nor an orphan of one (the ledger never booked "
                "it as a workload's pod), so the annotation is forged; only its controller "
                "and webhook give pods GPU devices; evicting the pod (--evict-conflicting-pods)"))
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": name, "namespace": ns},
                    "deleteOptions": {"preconditions": {"uid": meta.get("uid")}}}
        try:
            # a PodDisruptionBudget's refusal (429, not retried by runtime.retry) is said
            # at once, naming the budget: asked again on the pod's next update
            self.client.create_subresource("v1", "Pod", name, "eviction", eviction,
                                           namespace=ns, deadline=time.monotonic() + EVICT_DEADLINE)
        except NotFound:
            return
        except ApiError as exc:
            log.warning("pod.intruder.evict_failed", pod=object_key(pod), code=exc.status,
                        error=str(exc))
            if over:
                DEVICE_CONFLICTS.labels("evict_failed").inc()
            self.recorder.warning(pod, "EvictionFailed", f"could not evict the pod: {exc}")
            with self._lock:  # its next update asks again (a PodDisruptionBudget may allow it)
                self._asked.discard(str(meta.get("uid") or ""))
                self._refused.add(str(meta.get("uid") or ""))
            return
        if over:
            DEVICE_CONFLICTS.labels("evicted").inc()
        log.info("pod.intruder.evicted", pod=object_key(pod), devices=devices, overcommit=over)
