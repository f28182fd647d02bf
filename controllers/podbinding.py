"""The pod-binding controller of the seed-compatible path: a scheduler for pods
that say ``schedulerName: gpu-scheduler`` (a StatefulSet's, typically), binding
each through the Binding subresource, through the same ledger as GPUWorkloads.

One reconcile of pod ``namespace/name``:

1. Gone, finished (Succeeded/Failed), or deleted before it was bound: release what
   it held (DESIGN.md invariant 5) and wake whatever waits for capacity.
2. Bound (``spec.nodeName``): make sure the ledger knows what it holds (a pod bound
   by an earlier leader, or by someone else).
3. Unbound, with the ``gpu-scheduling-map`` annotation: its replica index (the
   ``apps.kubernetes.io/pod-index`` label, else the name's ordinal) picks the line
   of the map; the named node must exist, be Ready, and be neither cordoned nor
   tainted NoSchedule/NoExecute unless the pod tolerates it; the named devices must
   exist, be healthy and be held by no other workload.
   Unbound, without a map: the default strategy places one replica of
   ``nvidia.com/gpu`` limit (else 1) GPUs, honouring the pod's nodeSelector and
   tolerations.
   The placement is booked in the shared ledger, under the state lock, then the
   pod is bound; a failed bind releases the booking. When it cannot be placed, a
   ``FailedScheduling`` Warning Event on the pod says why, the pod stays Pending and
   is retried with exponential backoff, and at once when capacity is freed.

Ledger keys. A pod's booking is held under its controlling owner
(``StatefulSet:<ns>/<name>``; ``Pod:<ns>/<name>`` when it has none), so that one
StatefulSet's own map may name a device for several of its pods (the seed puts
replicas 3 and 4 both on node4:3) while a device held by any other workload is
refused (invariant 1). The owner's allocation is the list of its pods'
placements; booking or releasing one pod re-books the owner's list. A pod that
requests ``nvidia.com/gpu`` and has no map is booked under its own ``Pod:`` key and
counted (the kubelet's device plugin picks its devices). These bookings have their
pods' own priority (never above a GPUWorkload's maximum), so a higher-priority
workload may preempt them: the preemptor is nominated over the booking, the pods are
evicted (``evict_holder``), and the booking stays until they are gone.

A pod bound outside this scheduler (``spec.nodeName`` set at creation, or by another
binder) onto devices another workload holds is never booked: it gets a
``DeviceConflict`` Warning Event and counts in
``gpu_orchestrator_device_conflicts_total``; with ``evict_conflicting_pods`` (the
``--evict-conflicting-pods`` flag) it is also evicted through the Eviction API (which
honours its PodDisruptionBudget), since what is held wins over what was forced in.

What the binding records. The Binding carries the ``gpu.orchestrator.dev/devices``
annotation (the API server copies a Binding's annotations onto the pod), so a bound
pod says which devices it holds, the same annotation the webhook writes at admission.
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

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from api.v1alpha1.keys import DEVICES_ANNOTATION
from api.v1alpha1.types import (
    MAX_PRIORITY,
    SCHEDULING_MAP_ANNOTATION,
    DeviceExposure,
    GPUWorkload,
    Placement,
    SchedulingStrategy,
)
from controllers.gpuworkload import GPUWorkloadReconciler
from controllers.placement_state import PlacementState
from controllers.setup import only_in
from internal.metrics.domain import BAD_OBJECTS, DEVICE_CONFLICTS
from internal.scheduling.ledger import Ledger, LedgerConflict
from internal.scheduling.mapparser import MapParseError, parse_scheduling_map
from internal.scheduling.podindex import pod_index
from internal.scheduling.pods import (
    BadPod,
    is_controller_pod,
    parse_devices,
    pod_gpu_request,
    pod_is_active,
    pod_key,
    pod_uid,
)
from internal.scheduling.snapshot import tolerates, untolerated_taint
from runtime import Builder, Conflict, Controller, Manager, NotFound, Request, Result
from runtime.errors import ApiError
from runtime.events import EventRecorder
from runtime.predicates import Funcs, UpdateEvent
from runtime.store import Indexer

log = structlog.get_logger("podbinding")

JSON = Mapping[str, Any]

DEFAULT_SCHEDULER_NAME = "gpu-scheduler"
FAILED_SCHEDULING = "FailedScheduling"
def pod_priority(pod: JSON) -> int:
    """A seed pod's priority in the ledger: its own ``spec.priority`` (set from its
    PriorityClass), never above what a GPUWorkload may have, so a higher-priority
    workload can preempt it like any other (and a tenant cannot make its pods
    unpreemptible)."""
    try:
        return max(0, min(int(_spec(pod).get("priority") or 0), MAX_PRIORITY))
    except (TypeError, ValueError):
        return 0
#: the taint a cordoned node carries (the node lifecycle controller adds it)
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


# ------------------------------------------------------------------ pod helpers


def _meta(pod: JSON) -> JSON:
    return pod.get("metadata") or {}


def _spec(pod: JSON) -> JSON:
    return pod.get("spec") or {}


def owner_key(pod: JSON) -> str:
    """The ledger key of a seed-path pod: its controlling owner, else itself."""
    meta = _meta(pod)
    ns = meta.get("namespace") or "default"
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return f"{ref.get('kind')}:{ns}/{ref.get('name')}"
    return f"Pod:{ns}/{meta.get('name') or ''}"


def is_seed_key(key: str) -> bool:
    """Is ``key`` a ledger key of this path (``Kind:ns/name``), not a GPUWorkload's
    (``ns/name``; a namespace never contains ':')?"""
    return ":" in key.partition("/")[0]


def describe_holder(key: str) -> str:
    """``StatefulSet ns/name`` for a pod book's key, ``GPUWorkload ns/name`` else."""
    kind, sep, rest = key.partition(":")
    return f"{kind} {rest}" if sep else f"GPUWorkload {key}"


def _devs(devices: list[int] | tuple[int, ...]) -> str:
    return ",".join(map(str, devices))


# ------------------------------------------------------------------------ book


@dataclass(slots=True)
class Entry:
    """What one pod holds: under ``ledger_key``, one placement."""

    ledger_key: str
    placement: Placement
    gpus: int  # counted GPUs when the placement names no devices
    bound: bool = False
    priority: int = 0

    @property
    def counted(self) -> bool:
        return not self.placement.devices


def bound_entry(pod: JSON) -> Entry | None:
    """What a bound pod holds (``read_bound`` without its problems)."""
    return read_bound(pod)[0]


def read_bound(pod: JSON) -> tuple[Entry | None, list[str]]:
    """What a bound pod holds, as told by the pod, and what of it could not be read.

    The devices annotation, else its map line (when it names the node the pod is on),
    else its ``nvidia.com/gpu`` request, counted. None when it holds no GPU. A
    malformed devices annotation or map is a problem (a plain sentence for the
    user), never raised, and never makes the pod hold nothing: what can still be read
    is held, and a pod that says nothing readable holds its request, at least one GPU
    (what this scheduler gives a pod without a map), counted."""
    node = _spec(pod).get("nodeName")
    if not node:
        return None, []
    annotations = _meta(pod).get("annotations") or {}
    index, _ = pod_index(pod)
    problems: list[str] = []
    try:
        devices = parse_devices(annotations.get(DEVICES_ANNOTATION))
    except BadPod as exc:
        devices = None
        problems.append(str(exc))
    if devices is None and index is not None:
        text = annotations.get(SCHEDULING_MAP_ANNOTATION)
        if text is not None and text.strip():
            try:
                line = parse_scheduling_map(text).get(index)
            except MapParseError as exc:
                line = None
                problems.append(f"annotation {SCHEDULING_MAP_ANNOTATION}: {exc}")
            if line is not None and line.node == node:
                devices = list(line.devices)
    placement_index = index if index is not None else 0
    if devices:
        return Entry(owner_key(pod), Placement(index=placement_index, node=node,
                                               devices=devices), len(devices), True,
                     pod_priority(pod)), problems
    gpus = pod_gpu_request(pod)
    if problems:
        gpus = max(gpus, 1)
    if gpus > 0:
        return Entry(f"Pod:{pod_key(pod)}", Placement(index=placement_index, node=node), gpus,
                     True, pod_priority(pod)), problems
    return None, problems


class SeedBook:
    """The seed path's pods in the shared ledger (a ``PodBook`` of the
    PlacementState): pod key -> Entry, and the owner allocations they make up.

    Not thread-safe on its own: every call runs under the PlacementState lock."""

    def __init__(self, scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> None:
        self.scheduler_name = scheduler_name
        self.pods: dict[str, Entry] = {}
        self._by_key: dict[str, set[str]] = {}  # ledger key -> pod keys
        self.on_wake: Callable[[], None] = lambda: None
        #: asks a holder's pods to go (set to the reconciler's ``evict_holder``)
        self.on_evict: Callable[[str, str], Any] = lambda key, message: None

    # -- PodBook
    def owns(self, pod: JSON) -> bool:
        return _spec(pod).get("schedulerName") == self.scheduler_name and \
            not is_controller_pod(pod)

    def rebuild(self, ledger: Ledger, pods: list[JSON]) -> list[str]:
        self.pods.clear()
        self._by_key.clear()
        problems: list[str] = []
        for pod in sorted(pods, key=pod_key):
            if not self.owns(pod):
                continue
            key = pod_key(pod)
            ledger.remove_pod(pod_uid(pod))  # booked by its binding, not counted twice
            if not pod_is_active(pod):
                continue
            entry = bound_entry(pod)  # unreadable annotations: its reconcile reports them
            if entry is None:
                continue
            try:
                self.book(ledger, key, entry)
            except LedgerConflict as exc:
                problems.append(f"pod {key}: {exc}")
        return problems

    def wake(self) -> None:
        self.on_wake()

    def owns_key(self, ledger_key: str) -> bool:
        return ledger_key in self._by_key

    def evict(self, ledger_key: str, message: str) -> None:
        self.on_evict(ledger_key, message)

    # -- bookings
    def entry(self, key: str) -> Entry | None:
        return self.pods.get(key)

    def pod_keys(self, ledger_key: str) -> list[str]:
        """The pods (``ns/name``) whose bookings make up ``ledger_key``."""
        return sorted(self._by_key.get(ledger_key, ()))

    def _rebook(self, ledger: Ledger, ledger_key: str, entries: list[Entry]) -> None:
        if not entries:
            ledger.forget(ledger_key)
            return
        ledger.assume(ledger_key, [e.placement for e in entries],
                      gpus_per_replica=max(e.gpus for e in entries),
                      priority=max(e.priority for e in entries),
                      committed=all(e.bound for e in entries), check_capacity=False)

    def book(self, ledger: Ledger, key: str, entry: Entry) -> None:
        """Book ``entry`` for pod ``key`` with the other pods of its owner (raises
        LedgerConflict, changing nothing, when a device is held by another key)."""
        old = self.pods.get(key)
        if old is not None and old.ledger_key != entry.ledger_key:
            self.release(ledger, key)
            old = None
        others = [self.pods[k] for k in sorted(self._by_key.get(entry.ledger_key, ()))
                  if k != key]
        self._rebook(ledger, entry.ledger_key, [*others, entry])
        self.pods[key] = entry
        self._by_key.setdefault(entry.ledger_key, set()).add(key)

    def mark_bound(self, ledger: Ledger, key: str) -> None:
        entry = self.pods.get(key)
        if entry is None or entry.bound:
            return
        entry.bound = True
        if all(self.pods[k].bound for k in self._by_key.get(entry.ledger_key, ())):
            with contextlib.suppress(KeyError):
                ledger.commit(entry.ledger_key)

    def release(self, ledger: Ledger, key: str) -> Entry | None:
        """Release pod ``key``'s placement (its owner keeps the others')."""
        entry = self.pods.pop(key, None)
        if entry is None:
            return None
        keys = self._by_key.get(entry.ledger_key, set())
        keys.discard(key)
        if not keys:
            self._by_key.pop(entry.ledger_key, None)
        try:
            self._rebook(ledger, entry.ledger_key, [self.pods[k] for k in sorted(keys)])
        except LedgerConflict:  # cannot happen for a subset of what it held
            ledger.forget(entry.ledger_key)
        return entry


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


@dataclass
class _Waiting:
    attempts: dict[str, int] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)  # monotonic time of the last try
    lock: threading.Lock = field(default_factory=threading.Lock)


class PodBindingReconciler:
    def __init__(self, client: Any, recorder: EventRecorder, pods: Indexer,
                 state: Callable[[], PlacementState], book: SeedBook,
                 options: PodBindingOptions | None = None) -> None:
        self.client = client
        self.recorder = recorder
        self.pods = pods
        self.state = state
        self.book = book
        self.options = options or PodBindingOptions()
        self.enqueue_after: Callable[[Request, float], None] = lambda req, delay: None
        self._waiting = _Waiting()
        #: pod key -> (UID, message) of the unreadable annotations last reported
        self._reported: dict[str, tuple[str, str]] = {}
        book.on_wake = self._wake

    # ------------------------------------------------------------------ entry

    def reconcile(self, req: Request) -> Result | None:
        state = self.state()  # the ledger is rebuilt before the first placement
        key = f"{req.namespace}/{req.name}"
        pod = self.pods.get_by_name(req.name, req.namespace)
        if pod is None or not self.book.owns(pod) or not pod_is_active(pod):
            self._settled(key)
            self._release(state, key)
            with self._waiting.lock:
                self._reported.pop(key, None)
            return None
        if _spec(pod).get("nodeName"):
            self._settled(key)
            self._adopt(state, key, pod)
            return None
        if _meta(pod).get("deletionTimestamp"):
            self._settled(key)
            self._release(state, key)
            return None
        held = self.book.entry(key)
        if held is not None and held.bound:
            return None  # bound by us; the cache has not seen it yet
        with state.lock:
            entry, why = self._plan(state, pod)
            if entry is not None:
                try:
                    self.book.book(state.ledger, key, entry)
                except LedgerConflict as exc:
                    entry, why = None, str(exc)
        if entry is None:
            return self._unschedulable(pod, key, why)
        return self._bind(state, pod, key, entry)

    # --------------------------------------------------------------- planning

    def _plan(self, state: PlacementState, pod: JSON) -> tuple[Entry | None, str]:
        """Where ``pod`` goes, or why it cannot go anywhere. Under the state lock."""
        text = (_meta(pod).get("annotations") or {}).get(SCHEDULING_MAP_ANNOTATION)
        index, source = pod_index(pod)
        if text is None or not text.strip():
            return self._plan_default(state, pod, index)
        try:
            lines = parse_scheduling_map(text)
        except MapParseError as exc:
            return None, f"invalid {SCHEDULING_MAP_ANNOTATION} annotation: {exc}"
        if index is None:
            return None, f"cannot tell the pod's replica index: {source}"
        line = lines.get(index)
        if line is None:
            return None, (f"{SCHEDULING_MAP_ANNOTATION} has no entry for replica index "
                          f"{index} ({source}); it maps index(es) "
                          f"{', '.join(map(str, lines))}")
        key = owner_key(pod)
        why = self._check_exact(state, key, index, line.node, line.devices,
                                tuple(_spec(pod).get("tolerations") or ()))
        if why:
            return None, why
        return Entry(key, Placement(index=index, node=line.node, devices=list(line.devices)),
                     len(line.devices), priority=pod_priority(pod)), ""

    @staticmethod
    def _check_exact(state: PlacementState, key: str, index: int, node: str,
                     devices: tuple[int, ...],
                     tolerations: tuple[Mapping[str, Any], ...] = ()) -> str:
        ledger = state.ledger
        info = state.snapshot.get(node)
        where = f"replica index {index}: node {node}"
        if info is None:
            return f"{where} does not exist"
        if not info.ready:
            return f"{where} is not Ready"
        if info.unschedulable and not tolerates(tolerations, CORDON_TAINT):
            return f"{where} is cordoned (unschedulable) and the pod does not tolerate it"
        taint = untolerated_taint(info, tolerations)
        if taint is not None:
            return (f"{where} has the taint {taint.get('key')}"
                    f"{'=' + taint['value'] if taint.get('value') else ''}:"
                    f"{taint.get('effect')} that the pod does not tolerate")
        missing = [d for d in devices if d not in info.devices]
        if missing:
            return (f"{where}: device(s) {_devs(missing)} beyond the node's "
                    f"{len(info.devices)} GPU(s)")
        unhealthy = [d for d in devices if not info.devices[d].healthy]
        if unhealthy:
            return f"{where}: device(s) {_devs(unhealthy)} unhealthy"
        held: dict[int, str] = {}
        for d in devices:
            holder = ledger.holder(node, d)
            if holder is not None and holder != key:
                held[d] = holder
        if held:
            owners = ", ".join(describe_holder(h) for h in sorted(set(held.values())))
            return f"{where}: device(s) {_devs(sorted(held))} held by {owners}"
        new = [d for d in devices if ledger.holder(node, d) != key]
        free = ledger.free_count(node)
        if len(new) > free:
            return f"{where}: {free} free GPU(s), needs {len(new)} (other GPU pods)"
        return ""

    def _plan_default(self, state: PlacementState, pod: JSON,
                      index: int | None) -> tuple[Entry | None, str]:
        """No map: one replica by the default strategy."""
        meta, spec = _meta(pod), _spec(pod)
        requested = pod_gpu_request(pod)
        gpus = min(max(requested, 1), 64)
        counted = requested > 0  # the device plugin picks the devices
        strategy = self.options.default_strategy
        if strategy == SchedulingStrategy.ANNOTATION_MAP.value:
            strategy = SchedulingStrategy.LEAST_LOADED.value
        exposure = DeviceExposure.DEVICE_PLUGIN if counted else \
            DeviceExposure.CUDA_VISIBLE_DEVICES
        try:
            model = GPUWorkload.model_validate({
                # the model's key is the pod's own ``Pod:`` ledger key
                "metadata": {"name": meta.get("name"),
                             "namespace": f"Pod:{meta.get('namespace') or 'default'}"},
                "spec": {"gpusPerReplica": gpus, "schedulingStrategy": strategy,
                         "deviceExposure": exposure.value,
                         "nodeSelector": dict(spec.get("nodeSelector") or {}),
                         "template": {"spec": {"tolerations": [
                             dict(t) for t in spec.get("tolerations") or ()]}}},
            })
        except ValueError as exc:
            return None, f"cannot place the pod: {exc}"
        decision = state.scheduler.schedule(model)
        if not decision.ok or not decision.placements:
            return None, decision.message or "no node fits"
        p = decision.placements[0]
        i = index if index is not None else 0
        if decision.counted:
            return Entry(model.key, Placement(index=i, node=p.node), gpus,
                         priority=pod_priority(pod)), ""
        return Entry(owner_key(pod), Placement(index=i, node=p.node, devices=list(p.devices)),
                     gpus, priority=pod_priority(pod)), ""

    # ---------------------------------------------------------------- binding

    def _bind(self, state: PlacementState, pod: JSON, key: str, entry: Entry) -> Result | None:
        meta = _meta(pod)
        name, ns = meta["name"], meta.get("namespace") or "default"
        node, devices = entry.placement.node, entry.placement.devices
        binding: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": meta.get("uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if devices:
            # the API server copies a Binding's annotations onto the pod
            binding["metadata"]["annotations"] = {DEVICES_ANNOTATION: _devs(devices)}
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
        with state.lock:
            self.book.mark_bound(state.ledger, key)
        self._settled(key)
        what = f" (GPU devices {_devs(devices)})" if devices else \
            f" ({entry.gpus} GPU(s) for the device plugin)"
        self.recorder.normal(pod, "Scheduled", f"Successfully assigned {key} to {node}{what}")
        log.info("pod.bound", pod=key, node=node, devices=_devs(devices),
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
        conflict = ""
        with state.lock:
            have = self.book.entry(key)
            if have is not None and want is not None and (
                    (have.ledger_key, have.placement) == (want.ledger_key, want.placement)
                    or (problems and have.placement.node == want.placement.node)):
                want = have
                self.book.mark_bound(state.ledger, key)
            elif want is not None:
                try:
                    self.book.book(state.ledger, key, want)
                except LedgerConflict as exc:
                    conflict = str(exc)
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
            holds = (f"it is taken to hold GPU devices {_devs(held.placement.devices)} on "
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

    def evict_holder(self, ledger_key: str, message: str) -> int:
        """Ask every pod of the seed-path holder ``ledger_key`` to go (Eviction API,
        so PodDisruptionBudgets hold), with a ``Preempted`` Event saying why; returns
        how many were asked. For preemption: the devices stay held until the pods are
        gone (DESIGN.md invariant 3), so a caller keeps them nominated meanwhile."""
        with self.state().lock:
            keys = self.book.pod_keys(ledger_key)
        asked = 0
        for key in keys:
            ns, name = key.split("/", 1)
            pod = self.pods.get_by_name(name, ns)
            if pod is None:
                continue
            self.recorder.warning(pod, "Preempted", message)
            asked += bool(self._evict(pod, key))
        return asked

    def _evict(self, pod: JSON, key: str) -> bool:
        """POSTs an Eviction for ``pod`` (by UID); True when it was accepted or the
        pod is gone."""
        meta = _meta(pod)
        ns = meta.get("namespace") or "default"
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": meta.get("name"), "namespace": ns},
                    "deleteOptions": {"preconditions": {"uid": meta.get("uid")}}}
        try:
            self.client.create_subresource("v1", "Pod", meta.get("name"), "eviction",
                                           eviction, namespace=ns)
        except NotFound:
            return True  # gone already
        except ApiError as exc:
            log.warning("pod.evict.failed", pod=key, code=exc.status, error=str(exc))
            self.recorder.warning(pod, "EvictionFailed", f"could not evict the pod: {exc}")
            return False
        log.info("pod.evicted", pod=key)
        return True

    def _release(self, state: PlacementState, key: str) -> None:
        with state.lock:
            released = self.book.release(state.ledger, key)
        if released is not None:
            log.info("pod.released", pod=key, node=released.placement.node,
                     devices=_devs(released.placement.devices), holder=released.ledger_key)
            state.capacity_freed()

    # ---------------------------------------------------------------- waiting

    def _settled(self, key: str) -> None:
        with self._waiting.lock:
            self._waiting.attempts.pop(key, None)
            self._waiting.last.pop(key, None)

    def _wake(self) -> None:
        """Capacity was freed (or a node changed): retry every waiting pod now, or
        ``min_wake_interval`` after its last try (node heartbeats wake often)."""
        now = time.monotonic()
        with self._waiting.lock:
            due = {k: self._waiting.last.get(k, 0.0) + self.options.min_wake_interval - now
                   for k in self._waiting.attempts}
        for k, wait in due.items():
            ns, name = k.split("/", 1)
            self.enqueue_after(Request(ns, name), max(0.0, wait))


# ------------------------------------------------------------------- wiring


def pod_predicate(book: SeedBook) -> Funcs:
    """This scheduler's pods: every event while unbound; once bound, only binding,
    finishing and deletion."""

    def update(e: UpdateEvent) -> bool:
        if not book.owns(e.new):
            return False
        new_spec, old_spec = _spec(e.new), _spec(e.old)
        if not new_spec.get("nodeName") or new_spec.get("nodeName") != old_spec.get("nodeName"):
            return True
        if pod_is_active(e.old) != pod_is_active(e.new):
            return True
        return _meta(e.old).get("deletionTimestamp") != _meta(e.new).get("deletionTimestamp")

    return Funcs(create=lambda e: book.owns(e.obj), update=update,
                 delete=lambda e: book.owns(e.obj), generic=lambda e: book.owns(e.obj))


def setup_podbinding_controller(mgr: Manager, gpuworkload_reconciler: GPUWorkloadReconciler,
                                opts: PodBindingOptions | None = None
                                ) -> tuple[Controller, PodBindingReconciler]:
    """Adds the pod-binding controller on the shared Pod informer, booking in the
    GPUWorkload reconciler's placement state. Call before the manager starts (the
    state reads its pod books at its rebuild)."""
    opts = opts or PodBindingOptions()
    if gpuworkload_reconciler.state is not None:
        raise RuntimeError("set up the pod-binding controller before the placement state "
                           "is built (before the manager starts)")
    pods = mgr.informer_for("v1", "Pod")
    book = SeedBook(opts.scheduler_name)
    gpuworkload_reconciler.pod_books.append(book)
    reconciler = PodBindingReconciler(mgr.client, mgr.event_recorder(opts.scheduler_name),
                                      pods.indexer, gpuworkload_reconciler.ensure_state, book,
                                      opts)
    ctrl = (Builder(mgr).named("podbinding")
            .for_("v1", "Pod", pod_predicate(book))
            .with_options(max_concurrent_reconciles=opts.workers)
            .complete(only_in(opts.namespaces, reconciler)))
    reconciler.enqueue_after = ctrl.queue.add_after
    book.on_evict = reconciler.evict_holder
    return ctrl, reconciler

