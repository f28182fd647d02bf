"""The pod-binding controller of the seed-compatible path: a scheduler for pods
that say ``schedulerName: gpu-scheduler`` (a StatefulSet's, typically), binding
each through the Binding subresource, through the same ledger as GPUWorkloads.

One reconcile of pod ``namespace/name``:

1. Gone, finished (Succeeded/Failed), or deleted before it was bound: release what
   it held (docs/architecture.md, invariant 1) and wake whatever waits for capacity.
2. Bound (``spec.nodeName``): make sure the ledger knows what it holds (a pod bound
   by an earlier leader, or by someone else).
3. Unbound, with the ``gpu-scheduling-map`` annotation: its replica index (the
   ``apps.kubernetes.io/pod-index`` label, else the name's ordinal) picks the line
   of the map; the named node must exist, be Ready, and be neither cordoned nor
   tainted NoSchedule/NoExecute unless the pod tolerates it, fit the pod as the
   kubelet checks at admission (node fit: ``internal/scheduling/nodefit.py``), and
   its GPU agent must be reporting; the named devices must exist, be healthy and be held by no other
   owner: the exact-map filters of a mapped GPUWorkload, in their words
   (``internal/scheduling/filters.py``, through ``PlacementView.check_exact``).
   Unbound, without a map: the default strategy places one replica of
   ``nvidia.com/gpu`` limit (else 1) GPUs, honouring the pod's nodeSelector,
   tolerations and node fit.
   Where it goes is ``controllers.podbinding.seedplan``'s, read from a read-only view of the
   placement state. The placement is booked in the shared ledger, under the state
   lock (``PlacementState.seeds.book_seed``), then the pod is bound; a failed bind
   releases the booking. When it cannot be placed, a
   ``FailedScheduling`` Warning Event on the pod says why, the pod stays Pending and
   is retried with exponential backoff, and at once when capacity is freed.

Ledger keys and what a bound pod holds are ``controllers.podbinding.seedbook``'s: a pod's
booking is held under its controlling owner (``StatefulSet:<ns>/<name>``), with the
pod's own priority, so a higher-priority workload may preempt it: the preemptor is
nominated over the booking, the pods are evicted (``evict_holder``), and the booking
stays until they are gone.

A pod bound outside this scheduler (``spec.nodeName`` set at creation, or by another
binder) onto devices another workload holds is never booked: it gets a
``DeviceConflict`` Warning Event and counts in
``gpu_orchestrator_device_conflicts_total``; with ``evict_conflicting_pods`` (the
``--evict-conflicting-pods`` flag) it is also evicted through the Eviction API (which
honours its PodDisruptionBudget), since what is held wins over what was forced in.

What the binding records. The Binding carries the ``gpu.orchestrator.dev/devices``
annotation (the API server copies a Binding's annotations onto the pod), so a bound
pod says which devices it holds, the same annotation the webhook writes at admission;
a pod whose ``NVIDIA_VISIBLE_DEVICES`` is the webhook's reference to
``gpu.orchestrator.dev/device-uuids`` (a pod group's member in
``nvidia-visible-devices`` mode) gets that annotation in the same Binding: its
devices' UUIDs from the node's GPUNode, in the same order, else their host indices.
After a restart the ledger is rebuilt from it (else from the map line of the pod's
index, else from its ``nvidia.com/gpu`` request) before anything new is placed
(invariant 3). Annotations that cannot be read are reported (a ``BadAnnotation``
Warning Event, a log line, ``gpu_orchestrator_bad_objects_total{kind="Pod"}``, once per
pod and wording) and never make a pod hold nothing (``read_bound``). A pod without a
map gets devices booked but no
``CUDA_VISIBLE_DEVICES``: the webhook only injects env into annotated pods at
admission, and a pod's env cannot change after it, so such a pod either requests
``nvidia.com/gpu`` (and the device plugin exposes the GPUs) or merely reserves them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from api.v1alpha1.keys import DEVICE_UUIDS_ANNOTATION, DEVICES_ANNOTATION
from api.v1alpha1.types import SchedulingStrategy
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState
from controllers.podbinding.groupevict import group_refusal, namespaces_refusal, refused_text
from controllers.podbinding.groupquota import outside_queue
from controllers.podbinding.groups import DEFAULT_GROUP_TIMEOUT, GroupPath, Recognise
from controllers.podbinding.mapwarning import MisplacedMaps
from controllers.podbinding.memberclaims import MemberClaimsReader
from controllers.podbinding.podevict import evict_pod
from controllers.podbinding.seedbook import (
    DEFAULT_SCHEDULER_NAME,
    GROUP_SLOTS_ANNOTATION,
    Entry,
    SeedBook,
    devs_text,
    is_group_key,
    pod_meta,
    pod_spec,
    read_bound,
    without_unknown,
)
from controllers.podbinding.seedplan import plan
from controllers.shared.own_writes import OwnWrites
from internal.metrics.domain import BAD_OBJECTS, DEVICE_CONFLICTS
from internal.objects import JSON
from internal.scheduling.pods import (
    pod_is_active,
    pod_uid,
)
from internal.webhook.groupexposure import reads_uuids
from runtime import Conflict, NotFound, Request, Result
from runtime.events import EventRecorder
from runtime.store import Indexer

log = structlog.get_logger("podbinding")


FAILED_SCHEDULING = "FailedScheduling"


# ------------------------------------------------------------------ reconciler


@dataclass
class PodBindingOptions:
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    workers: int = 2
    #: strategy for pods without a map (annotationMap falls back to leastLoaded)
    default_strategy: str = SchedulingStrategy.LEAST_LOADED.value
    initial_backoff: float = 1.0  # seconds before the first retry of an unplaceable pod
    max_backoff: float = 60.0
    #: freed capacity retries a waiting pod at once, but not more often than this
    min_wake_interval: float = 1.0
    #: evict a pod bound by someone else onto devices another workload holds
    evict_conflicting_pods: bool = False
    #: bind only pods of these namespaces (empty: all)
    namespaces: frozenset[str] = frozenset()
    #: seconds a pod group may wait for its members before it is reported
    group_timeout: float = DEFAULT_GROUP_TIMEOUT


@dataclass
class _Waiting:
    attempts: dict[str, int] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)  # monotonic time of the last try
    lock: threading.Lock = field(default_factory=threading.Lock)


class PodBindingReconciler:
    def __init__(self, client: Any, recorder: EventRecorder, pods: Indexer,
                 states: PlacementStateSource, book: SeedBook,
                 options: PodBindingOptions | None = None,
                 own_writes: OwnWrites | None = None,
                 recognise: Recognise | None = None,
                 claims: MemberClaimsReader | None = None) -> None:
        self.client = client
        #: our Bindings the cache has not shown yet (the controller's ``OwnWrites``)
        self.own_writes = own_writes if own_writes is not None else OwnWrites()
        self.recorder = recorder
        self.pods = pods
        #: the manager's one placement state, shared with the GPUWorkload reconciler
        #: and the claims (built from the caches before its first use)
        self.states = states
        self.book = book
        self.options = options or PodBindingOptions()
        #: other controllers' gangs: a pod's group, placed whole (groups.py)
        self.groups = GroupPath(recognise or (lambda pod: None), book, pods, recorder,
                                self.options.default_strategy, self.options.group_timeout)
        if claims is not None:  # dra members' claims (DRA on)
            self.groups.claims = claims
        self.enqueue_after: Callable[[Request, float], None] = lambda req, delay: None
        self._waiting = _Waiting()
        #: pod key -> (UID, message) of the unreadable annotations last reported
        self._reported: dict[str, tuple[str, str]] = {}
        self.misplaced_maps = MisplacedMaps(client, recorder)
        book.on_wake = self._wake
        self.groups.budgets = self.victims_budget_refusal  # a group's preemption

    # ------------------------------------------------------------------ entry

    def reconcile(self, req: Request) -> Result | None:
        state = self.states.get()  # the ledger is rebuilt before the first placement
        key = f"{req.namespace}/{req.name}"
        pod = self.pods.get_by_name(req.name, req.namespace)
        if pod is None or not self.book.owns(pod) or not pod_is_active(pod):
            if pod is not None and (pod.get("status") or {}).get("phase") == "Succeeded":
                self.book.finished(key)  # a group member done: its slot goes with it
            self._settled(key)
            self._release(state, key)
            self.groups.forget(state, key)  # its group's place in a queue's line
            with self._waiting.lock:
                self._reported.pop(key, None)
            return None
        held = self.book.entry(key)
        if held is not None and held.uid and held.uid != pod_uid(pod):
            # the booking of an older pod of that name (deleted, then created again
            # before this reconcile): not this one's (identity is the UID)
            self._release(state, key)
        if pod_spec(pod).get("nodeName"):
            self._settled(key)
            self._adopt(state, key, pod)
            return self.groups.await_workers(pod, key)  # a leader's workers to come
        if pod_meta(pod).get("deletionTimestamp"):
            self._settled(key)
            self._release(state, key)
            self.groups.forget(state, key)
            return None
        if self.own_writes.binding_on_its_way(pod):
            return None  # bound by us; the cache has not seen it yet
        group = self.groups.recognise(pod)
        if group is not None:  # another controller's gang: placed whole (groups.py)
            return self.groups.place(state, pod, key, group, self._bind,
                                     self._unschedulable, self.enqueue_after)
        refused = outside_queue(state, pod)  # its queue would not count it (groupquota.py)
        if refused is not None:
            return self._unschedulable(pod, key, refused)
        self.misplaced_maps.check(pod)  # a map on its StatefulSet's own metadata
        entry, why = state.seeds.book_seed(
            self.book, key, lambda view: plan(view, pod, self.options.default_strategy))
        if entry is None:
            return self._unschedulable(pod, key, why)
        return self._bind(state, pod, key, entry)

    # ---------------------------------------------------------------- binding

    def _bind(self, state: PlacementState, pod: JSON, key: str, entry: Entry) -> Result | None:
        meta = pod_meta(pod)
        name, ns = meta["name"], meta.get("namespace") or "default"
        node, devices = entry.placement.node, entry.placement.devices
        binding: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": meta.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if devices:
            # the API server copies a Binding's annotations onto the pod
            binding["metadata"]["annotations"] = {DEVICES_ANNOTATION: devs_text(devices)}
            if entry.slots_note:  # a group member's: its group's other slots
                binding["metadata"]["annotations"][GROUP_SLOTS_ANNOTATION] = entry.slots_note
            if reads_uuids(pod):  # its NVIDIA_VISIBLE_DEVICES reads them (groupexposure)
                uuids = state.uuids(node, list(devices)) or [str(d) for d in devices]
                binding["metadata"]["annotations"][DEVICE_UUIDS_ANNOTATION] = ",".join(uuids)
        # a dra member's claims are allocated to its devices first, as kube-scheduler's
        # DRA plugin does in PreBind (memberclaims.py): the kubelet starts it only then
        unallocated = self.groups.claims.allocate(
            pod, node, list(devices), entry.ledger_key, state.slice_results
        ) if is_group_key(entry.ledger_key) else ""
        if unallocated:
            self._release(state, key)  # never bound: as a failed bind
            return self._unschedulable(pod, key, f"its ResourceClaim was not allocated, "
                                                 f"so it is not bound: {unallocated}")
        try:
            self.client.create_subresource("v1", "Pod", name, "binding", binding, namespace=ns)
        except (NotFound, Conflict) as exc:
            # gone, re-created under the same name, or bound meanwhile: the pod's own
            # events bring it back (a bound pod is then adopted)
            self._release(state, key)
            log.info("pod.bind.skipped", pod=key, node=node, reason=type(exc).__name__,
                     error=str(exc))
            return None
        except Exception:
            self._release(state, key)  # never bound: release the booking
            raise
        self.own_writes.bound(pod)
        state.seeds.mark_seed_bound(self.book, key)
        self._settled(key)
        what = f" (GPU devices {devs_text(devices)})" if devices else \
            f" ({entry.gpus} GPU(s) for the device plugin)"
        self.recorder.normal(pod, "Scheduled", f"Successfully assigned {key} to {node}{what}")
        log.info("pod.bound", pod=key, node=node, devices=devs_text(devices),
                 holder=entry.ledger_key)
        return None

    def _unschedulable(self, pod: JSON, key: str, why: str) -> Result:
        with self._waiting.lock:
            attempts = self._waiting.attempts.get(key, 0)
            self._waiting.attempts[key] = attempts + 1
            self._waiting.last[key] = time.monotonic()
        self.recorder.warning(pod, FAILED_SCHEDULING, why)
        delay = min(self.options.max_backoff, self.options.initial_backoff * 2 ** min(attempts, 30))
        log.info("pod.unschedulable", pod=key, reason=why, attempts=attempts + 1,
                 retry_in=delay)
        return Result(requeue_after=delay)

    # ---------------------------------------------------------------- holding

    def _adopt(self, state: PlacementState, key: str, pod: JSON) -> None:
        """A bound pod: the ledger must know what it holds. A pod whose annotations
        cannot be read is reported (``_report_bad``); what the ledger already books for
        it on its node stays (surer than a guess from the rest of the pod)."""
        want, problems = read_bound(pod)
        # a group member holds under its group (still, when its group is unreadable)
        want = self.groups.regroup(pod, want, self.book.entry(key))
        unknown: list[str] = []
        if want is not None:
            want, unknown = without_unknown(pod, want, state.node_devices(want.placement.node))
            problems += unknown
        def keep(have: Entry) -> bool:
            # what is booked stays when the pod cannot be read, unless it is a device
            # the node lacks (booked by a rebuild, which does not know the nodes yet)
            assert want is not None
            return (have.ledger_key, have.placement) == (want.ledger_key, want.placement) \
                or (bool(problems) and not unknown
                    and have.placement.node == want.placement.node)
        want, conflict = state.seeds.adopt_seed(self.book, key, want, keep)
        if problems:
            self._report_bad(pod, key, problems, None if conflict else want)
        if conflict:
            self._conflict(pod, key, conflict)

    def _report_bad(self, pod: JSON, key: str, problems: list[str], held: Entry | None) -> None:
        """A ``BadAnnotation`` Warning Event, a log line and
        ``gpu_orchestrator_bad_objects_total{kind="Pod"}``, once per pod (by UID) and
        wording: the same pod read again says nothing new."""
        if held is None:
            holds = "it is booked nowhere: what it may hold is held by another workload"
        elif held.counted:
            holds = f"it is taken to hold {held.gpus} GPU(s) on {held.placement.node}, counted"
        else:
            holds = (f"it is taken to hold GPU devices {devs_text(held.placement.devices)} on "
                     f"{held.placement.node}")
        message = f"{'; '.join(problems)}; {holds}"
        seen = (pod_uid(pod), message)
        with self._waiting.lock:
            if self._reported.get(key) == seen:
                return
            self._reported[key] = seen
        BAD_OBJECTS.labels("Pod").inc()
        log.warning("pod.adopt.bad_annotation", pod=key, problem=message)
        self.recorder.warning(pod, "BadAnnotation", message)

    def _conflict(self, pod: JSON, key: str, conflict: str) -> None:
        """Report (and, by the admin's flag, evict) a pod bound onto held devices."""
        log.warning("pod.adopt.conflict", pod=key, error=conflict)
        evict = self.options.evict_conflicting_pods
        self.recorder.warning(pod, "DeviceConflict",
                              f"bound outside this scheduler to devices another workload "
                              f"holds: {conflict}" + ("; evicting it" if evict else ""))
        if not evict:
            DEVICE_CONFLICTS.labels("reported").inc()
            return
        DEVICE_CONFLICTS.labels("evicted" if self._evict(pod, key) else "evict_failed").inc()

    def evict_holder(self, ledger_key: str, message: str) -> str | None:
        """Ask every pod of the seed-path holder ``ledger_key`` to go (Eviction API,
        so PodDisruptionBudgets hold), with a ``Preempted`` Event saying why. For
        preemption: the devices stay held until the pods are gone (docs/architecture.md,
        invariants 2 and 3), so a caller keeps them nominated meanwhile. A pod
        group's members go all or none: where the PodDisruptionBudgets over them
        would refuse some, none is asked (``groupevict.budget_refusal``), each says
        why (``EvictionFailed``), and so is the preemptor: the refusal is returned
        (``preemption of pod group ... refused: ...``), which its nomination gives
        up (the placement state, as it books the preemption); None when the pods
        were asked."""
        pods = self._holder_pods(ledger_key)
        refused = self.holder_refusal(ledger_key, message, pods)
        if refused is not None:
            return refused
        for key, pod in pods:
            self.recorder.warning(pod, "Preempted", message)
            self._evict(pod, key)
        return None

    def holder_refusal(self, ledger_key: str, message: str,
                       pods: list[tuple[str, JSON]] | None = None) -> str | None:
        """Why ``evict_holder`` would ask none of ``ledger_key``'s pods to go now
        (a pod group whose budgets refuse: each member says so once per wording,
        ``EvictionFailed``), else None; asked before a preemption of it is booked
        too, so nothing is booked or evicted for a preemption that cannot happen."""
        pods = self._holder_pods(ledger_key) if pods is None else pods
        refusal = group_refusal(self.client, ledger_key, [p for _, p in pods])
        if refusal is None:
            return None
        said = (f"{message}, but {refusal}: no member is evicted (a pod group is "
                "preempted whole or not at all)")
        for _, pod in pods:
            if self.groups.waits.tell_once(pod_uid(pod), said):
                log.warning("group.evict.refused", holder=ledger_key, reason=refusal)
                self.recorder.warning(pod, "EvictionFailed", said)
        return refused_text(ledger_key, refusal)

    def _holder_pods(self, ledger_key: str) -> list[tuple[str, JSON]]:
        pods: list[tuple[str, JSON]] = []
        for key in self.states.get().seeds.seed_pod_keys(self.book, ledger_key):
            ns, name = key.split("/", 1)
            pod = self.pods.get_by_name(name, ns)
            if pod is not None:
                pods.append((key, pod))
        return pods

    def group_created(self, ledger_key: str) -> str | None:
        """When the pod group booked as ``ledger_key`` was made, as its members'
        pods say (the queue manager's ``group_dates``: a group admitted before the
        manager started is as old in a reclaim's order as an uninterrupted one
        records it), or None."""
        state = self.states.if_ready()  # asked from a decision: never fills one
        if state is None:
            return None
        return self.groups.created(state.seeds.seed_pod_keys(self.book, ledger_key))

    def victims_budget_refusal(self, victims: list[str]) -> str | None:
        """Why the PodDisruptionBudgets refuse evicting every pod of the seed-path
        holders among ``victims`` (ledger keys: a group's, a StatefulSet's) at
        once, or None: a preempting pod group asks before it books anything, so it
        evicts all its victims or none (GPUWorkload victims delete their own
        children, as for a GPUWorkload preemptor)."""
        seeds = self.states.get().seeds
        by_ns: dict[str, list[JSON]] = {}
        for victim in victims:
            for key in seeds.seed_pod_keys(self.book, victim):
                ns, name = key.split("/", 1)
                pod = self.pods.get_by_name(name, ns)
                if pod is not None:
                    by_ns.setdefault(ns, []).append(pod)
        return namespaces_refusal(self.client, by_ns)

    def _evict(self, pod: JSON, key: str) -> bool:
        return evict_pod(self.client, self.recorder, pod, key)

    def _release(self, state: PlacementState, key: str) -> None:
        released = state.seeds.release_seed(self.book, key)
        if released is not None:
            log.info("pod.released", pod=key, node=released.placement.node,
                     devices=devs_text(released.placement.devices), holder=released.ledger_key)
            state.capacity_freed()

    # ---------------------------------------------------------------- waiting

    def _settled(self, key: str) -> None:
        with self._waiting.lock:
            self._waiting.attempts.pop(key, None)
            self._waiting.last.pop(key, None)

    def _wake(self) -> None:
        """Capacity was freed (or a node changed): retry every waiting pod now, or
        ``min_wake_interval`` after its last try (node heartbeats wake often); a
        member of a nominated group waiting for its victims to go, now (it only
        looks whether they are gone)."""
        now = time.monotonic()
        with self._waiting.lock:
            due = {k: self._waiting.last.get(k, 0.0) + self.options.min_wake_interval - now
                   for k in self._waiting.attempts}
        due.update((k, 0.0) for k in self.groups.waits.nominated())
        for k, wait in due.items():
            ns, name = k.split("/", 1)
            self.enqueue_after(Request(ns, name), max(0.0, wait))
