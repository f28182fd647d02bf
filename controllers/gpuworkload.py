"""The GPUWorkload reconciler: a workload becomes a placement, then its children.

One reconcile of ``namespace/name``:

1. Gone or being deleted: release its devices (its children go with it through
   their ownerReferences).
2. Not placed: decide with the strategy and book the decision in the ledger
   (assume), write ``status.placements`` with the object's resourceVersion (the
   commit point), then commit. A failed write releases the booking. Nothing fits:
   the ``Scheduled=False`` condition says why per node, an Event says it too, and
   the retry policy sets ``nextRetryTime``; after ``maxRetries`` the workload fails.
3. Placed: create each replica's child under its deterministic name, bound to its
   node with the device environment, then aggregate the children's phases. A failed
   replica or a vanished node ends the attempt: children deleted, devices released,
   and the retry policy decides between another attempt and Failed.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError

from api.v1alpha1.types import (
    API_VERSION,
    DeviceExposure,
    GPUWorkload,
    Phase,
    SchedulingStrategy,
    WorkloadKind,
)
from controllers import children as ch
from controllers.conditions import (
    FAILED,
    PREEMPTED,
    READY,
    SCHEDULED,
    aggregate,
    child_phase,
    get_condition,
    set_condition,
)
from controllers.placement_state import PlacementState, PodBook
from internal import metrics as m
from internal.backoff import next_delay, should_retry
from internal.scheduling.framework import INVALID_MAP, PREEMPT, UNSCHEDULABLE
from runtime import AlreadyExists, Conflict, NotFound, Request, Result
from runtime.events import EventRecorder
from runtime.store import NODE_NAME_INDEX, Indexer

log = structlog.get_logger("gpuworkload")

ATTEMPT_LABEL = "gpu.orchestrator.dev/attempt"
#: a lower-priority workload waits this long for a never-tried higher one to go first
PRIORITY_GATE_DELAY = 0.2

JSON = Mapping[str, Any]


def _now() -> datetime:
    return datetime.now(UTC)


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(s: str | None) -> datetime | None:
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


@dataclass
class Options:
    default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES
    default_strategy: str | None = None  # used when a spec names none (the CRD defaults it)


class GPUWorkloadReconciler:
    def __init__(self, client: Any, recorder: EventRecorder, workloads: Indexer,
                 pods: Indexer, jobs: Indexer, state_factory: Callable[[], PlacementState],
                 options: Options | None = None, clock: Callable[[], datetime] = _now,
                 rng: random.Random | None = None) -> None:
        self.client = client
        self.recorder = recorder
        self.workloads = workloads
        self.pods = pods
        self.jobs = jobs
        self.options = options or Options()
        self.clock = clock
        self.rng = rng or random.Random()
        self._state_factory = state_factory
        self.state: PlacementState | None = None
        #: other controllers booking pods in the same ledger; register before the
        #: state is built (it reads them once, at its rebuild)
        self.pod_books: list[PodBook] = []
        self._state_lock = threading.Lock()
        self._bound_observed: set[str] = set()

    # ------------------------------------------------------------------ entry

    def ensure_state(self) -> PlacementState:
        """The ledger is rebuilt from the cache before the first placement."""
        state = self.state
        if state is not None and state.ready:
            return state
        with self._state_lock:
            if self.state is None or not self.state.ready:
                self.state = self._state_factory()
            return self.state

    def reconcile(self, req: Request) -> Result | None:
        state = self.ensure_state()
        key = f"{req.namespace}/{req.name}"
        raw = self.workloads.get_by_name(req.name, req.namespace)
        if raw is None or (raw.get("metadata") or {}).get("deletionTimestamp"):
            state.forget(key)
            self._bound_observed.discard(key)
            return None
        try:
            w = GPUWorkload.model_validate(raw)
        except ValidationError as exc:
            return self._invalid_spec(raw, exc)
        if self.options.default_strategy and "schedulingStrategy" not in (raw.get("spec") or {}):
            w.spec.scheduling_strategy = SchedulingStrategy(self.options.default_strategy)
        status = raw.get("status") or {}
        if status.get("phase") in (Phase.SUCCEEDED.value, Phase.FAILED.value):
            state.forget(key)
            return None
        if state.is_behind(raw):
            # The cache has not caught up with our own last write of this object.
            return Result(requeue_after=0.1)
        eviction = state.eviction(key)
        if eviction is not None:
            self._evicted(raw, eviction)
            return None
        if not w.status.placements:
            if state.is_committed(key):
                # Our own placement write has not reached the cache yet.
                return Result(requeue_after=0.1)
            return self._place(w, raw)
        if not state.held_by(key) and not state.adopt(raw):
            # A committed placement this ledger did not hold (a write whose answer
            # was lost, a previous leader) and that now collides with another one.
            return self._end_attempt(w, raw, "PlacementConflict",
                                     "its devices were booked by another workload")
        return self._run(w, raw)

    # ---------------------------------------------------------------- placing

    def _place(self, w: GPUWorkload, raw: JSON) -> Result | None:
        state = self.ensure_state()
        key = w.key
        now = self.clock()
        if state.higher_priority_fresh(key, w.spec.priority):
            return Result(requeue_after=PRIORITY_GATE_DELAY)
        started = time.perf_counter()
        decision = state.decide(w)
        strategy = decision.strategy
        m.DECISION_LATENCY.labels(strategy).observe(time.perf_counter() - started)
        log.debug("placement.decided", workload=key, outcome=decision.outcome,
                  strategy=strategy, nodes=decision.nodes, visited=decision.visited)

        if decision.ok:
            m.SCHEDULING_ATTEMPTS.labels(strategy, "scheduled").inc()
            placements = [p.model_dump(by_alias=True) for p in decision.placements]
            # The commit write already says what _run would write once the children
            # exist (none running yet, Ready=False Starting), so that second status
            # write is skipped: one API request less per workload (bench/).
            _, starting = aggregate({}, w.spec.replicas)
            status = self._status(raw, phase=Phase.SCHEDULED, message=starting,
                                  placements=placements, next_retry=None,
                                  condition=(SCHEDULED, True, "Scheduled", decision.message))
            status["conditions"] = set_condition(
                status["conditions"], READY, False, "Starting", starting, _fmt(now),
                raw["metadata"].get("generation"))
            if get_condition(raw.get("status") or {}, PREEMPTED):
                status["conditions"] = set_condition(
                    status["conditions"], PREEMPTED, False, "PlacedAgain", decision.message,
                    _fmt(now), raw["metadata"].get("generation"))
            try:
                raw = self._write_status(raw, status, precondition=True)
            except Exception:
                state.forget(key)  # the booking was never committed: release it
                raise
            state.commit(key)
            self.recorder.normal(raw, "Scheduled", decision.message)
            log.info("placement.committed", workload=key, strategy=strategy,
                     placements=";".join(f"{p.index}={p.node}:{','.join(map(str, p.devices))}"
                                         for p in decision.placements))
            return self._run(GPUWorkload.model_validate(raw), raw)

        if decision.outcome == INVALID_MAP:
            m.SCHEDULING_ATTEMPTS.labels(strategy, "invalid").inc()
            self._set_unplaced(raw, "InvalidSchedulingMap", decision.message)
            return None  # a user error: retried when the spec changes, not before

        if decision.outcome == PREEMPT:
            m.SCHEDULING_ATTEMPTS.labels(strategy, "preempting").inc()
            for victim in decision.victims:
                self._preempt(victim, w)
            return Result(requeue_after=0.05)

        m.SCHEDULING_ATTEMPTS.labels(strategy, "unschedulable").inc()
        return self._unschedulable(w, raw, decision.message, now)

    def _unschedulable(self, w: GPUWorkload, raw: JSON, message: str, now: datetime) -> Result:
        """Nothing fits. Attempts on the retry timer count as retries; attempts woken
        early by freed capacity do not."""
        policy = w.spec.retry_policy
        due_at = _parse((raw.get("status") or {}).get("nextRetryTime"))
        retries = w.status.retries
        if due_at is not None and now < due_at:
            self._set_unplaced(raw, UNSCHEDULABLE, message, warn=False)
            return Result(requeue_after=(due_at - now).total_seconds())
        if due_at is not None:
            retries += 1
            m.RETRIES.inc()
        if not should_retry(retries, policy) and due_at is not None:
            msg = f"gave up after {retries} retries: {message}"
            self._fail(raw, UNSCHEDULABLE, msg, retries=retries)
            return Result()
        delay = next_delay(retries + 1, policy, self.rng)
        nxt = _fmt(now.fromtimestamp(now.timestamp() + delay, UTC))
        self._set_unplaced(raw, UNSCHEDULABLE, message, retries=retries, next_retry=nxt)
        return Result(requeue_after=delay)

    def _set_unplaced(self, raw: JSON, reason: str, message: str, *, warn: bool = True,
                      retries: int | None = None, next_retry: str | None = None) -> None:
        current = get_condition(raw.get("status") or {}, SCHEDULED) or {}
        if warn or current.get("message") != message:
            self.recorder.warning(raw, "FailedScheduling" if reason == UNSCHEDULABLE else reason,
                                  message)
        extra: dict[str, Any] = {}
        if retries is not None:
            extra["retries"] = retries
        status = self._status(raw, phase=Phase.PENDING, message=message, placements=None,
                              next_retry=next_retry if next_retry else
                              (raw.get("status") or {}).get("nextRetryTime"),
                              condition=(SCHEDULED, False, reason, message), **extra)
        self._write_status(raw, status)

    def _preempt(self, victim_key: str, by: GPUWorkload) -> None:
        """Releases the victim's devices now; its own reconcile (never this one: one
        worker per key) deletes its children and records why."""
        msg = (f"preempted by {by.key} (priority {by.spec.priority}) to make room; "
               f"waiting to be placed again")
        self.ensure_state().evict(victim_key, msg)
        m.PREEMPTIONS.inc()
        log.info("placement.preempted", workload=victim_key, by=by.key)

    def _evicted(self, raw: JSON, msg: str) -> None:
        """The victim's side of a preemption: children gone, back to Pending."""
        self._delete_children(raw)
        self.recorder.warning(raw, "Preempted", msg)
        status = self._status(raw, phase=Phase.PENDING, message=msg, placements=None,
                              next_retry=None, condition=(SCHEDULED, False, "Preempted", msg))
        now, gen = _fmt(self.clock()), raw["metadata"].get("generation")
        status["conditions"] = set_condition(status["conditions"], PREEMPTED, True, "Preempted",
                                             msg, now, gen)
        status["conditions"] = set_condition(status["conditions"], READY, False, "Preempted",
                                             msg, now, gen)
        self._write_status(raw, status)
        self.ensure_state().evicted(_key(raw))

    # ---------------------------------------------------------------- running

    def _run(self, w: GPUWorkload, raw: JSON) -> Result | None:
        state = self.ensure_state()
        key = w.key
        meta = raw["metadata"]
        attempt = str(w.status.retries)
        lost = sorted({p.node for p in w.status.placements if not state.has_node(p.node)})
        if lost:
            self._force_delete_on(raw, lost)
            return self._end_attempt(w, raw, "NodeLost",
                                     f"node(s) {', '.join(lost)} disappeared")
        exposure = w.spec.device_exposure or self.options.default_exposure
        if exposure is DeviceExposure.DEVICE_PLUGIN and any(p.devices for p in
                                                            w.status.placements):
            # A map names devices, so the kubelet must not pick others.
            exposure = DeviceExposure.CUDA_VISIBLE_DEVICES
        kind = "Job" if w.spec.workload_kind is WorkloadKind.JOB else "Pod"
        cache = self.jobs if kind == "Job" else self.pods
        mine: dict[int, JSON] = {}
        stale = False
        for obj in cache.by_index("owner-uid", meta["uid"]):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            try:
                idx = int(labels.get(ch.INDEX_LABEL, ""))
            except ValueError:
                continue
            if labels.get(ATTEMPT_LABEL, "0") == attempt:
                mine[idx] = obj
            else:
                stale = True  # a previous attempt's child, still going away
        if stale:
            self._delete_children(raw, keep_attempt=attempt)
            return Result(requeue_after=0.5)
        if w.spec.replicas > 1:
            self._ensure(ch.build_service(w, raw))
        created_now = False
        for p in w.status.placements:
            if p.index in mine:
                continue
            if w.status.phase is Phase.RUNNING:
                return self._end_attempt(w, raw, "ReplicaLost",
                                         f"replica {p.index} on {p.node} was deleted")
            child = ch.build_child(w, raw, p, exposure, state.uuids)
            child["metadata"]["labels"][ATTEMPT_LABEL] = attempt
            if kind == "Job":
                child["spec"]["template"]["metadata"]["labels"][ATTEMPT_LABEL] = attempt
            if self._ensure(child):
                created_now = True
            mine[p.index] = child
        if created_now and key not in self._bound_observed:
            self._bound_observed.add(key)
            created = _parse(meta.get("creationTimestamp"))
            if created is not None and w.status.retries == 0:
                m.CREATE_TO_BOUND.observe(max(0.0, (self.clock() - created).total_seconds()))

        phases = {i: child_phase(c) for i, c in mine.items()}
        phase, message = aggregate(phases, w.spec.replicas)
        if phase is Phase.FAILED:
            return self._end_attempt(w, raw, "ReplicaFailed", message)
        status = self._status(raw, phase=phase, message=message)
        now = _fmt(self.clock())
        gen = meta.get("generation")
        if phase is Phase.SUCCEEDED:
            state.forget(key)
            status["conditions"] = set_condition(status["conditions"], READY, False,
                                                 "Succeeded", message, now, gen)
        elif phase is Phase.RUNNING:
            status["conditions"] = set_condition(status["conditions"], READY, True,
                                                 "Running", message, now, gen)
        else:
            status["conditions"] = set_condition(status["conditions"], READY, False,
                                                 "Starting", message, now, gen)
        self._write_status(raw, status)
        return None

    def _end_attempt(self, w: GPUWorkload, raw: JSON, reason: str, message: str) -> Result | None:
        """A replica failed or its node vanished: free everything, then retry or fail."""
        state = self.ensure_state()
        self._delete_children(raw, only_unfinished=True)
        state.forget(w.key)
        retries = w.status.retries
        if not should_retry(retries, w.spec.retry_policy):
            self._fail(raw, reason, f"{message}; no retries left "
                                    f"(maxRetries {w.spec.retry_policy.max_retries})")
            return None
        retries += 1
        m.RETRIES.inc()
        delay = next_delay(retries, w.spec.retry_policy, self.rng)
        nxt = _fmt(datetime.fromtimestamp(self.clock().timestamp() + delay, UTC))
        msg = f"{message}; retry {retries} of {w.spec.retry_policy.max_retries} in {delay:.0f}s"
        self.recorder.warning(raw, reason, msg)
        status = self._status(raw, phase=Phase.PENDING, message=msg, placements=None,
                              next_retry=nxt, retries=retries,
                              condition=(SCHEDULED, False, reason, msg))
        status["conditions"] = set_condition(status["conditions"], READY, False, reason, msg,
                                             _fmt(self.clock()), raw["metadata"].get("generation"))
        self._write_status(raw, status)
        self._bound_observed.discard(w.key)
        return Result(requeue_after=delay)

    def _fail(self, raw: JSON, reason: str, message: str, retries: int | None = None) -> None:
        self.ensure_state().forget(_key(raw))
        m.FAILURES.labels(reason).inc()
        self.recorder.warning(raw, reason, message)
        extra = {"retries": retries} if retries is not None else {}
        status = self._status(raw, phase=Phase.FAILED, message=message, next_retry=None,
                              condition=(FAILED, True, reason, message), **extra)
        status["conditions"] = set_condition(status["conditions"], READY, False, reason,
                                             message, _fmt(self.clock()),
                                             raw["metadata"].get("generation"))
        self._write_status(raw, status)
        log.info("workload.failed", workload=_key(raw), reason=reason, message=message)

    def _invalid_spec(self, raw: JSON, exc: ValidationError) -> None:
        errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        message = f"invalid spec: {errs}"
        self._set_unplaced(raw, "InvalidSpec", message)

    # ---------------------------------------------------------------- writing

    def _status(self, raw: JSON, *, phase: Phase, message: str,
                placements: list[dict[str, Any]] | type[Ellipsis] | None = ...,
                next_retry: str | type[Ellipsis] | None = ...,
                condition: tuple[str, bool, str, str] | None = None,
                retries: int | None = None) -> dict[str, Any]:
        old = raw.get("status") or {}
        gen = raw["metadata"].get("generation")
        conditions = [dict(c) for c in old.get("conditions") or ()]
        if condition is not None:
            t, s, reason, msg = condition
            conditions = set_condition(conditions, t, s, reason, msg, _fmt(self.clock()), gen)
        status: dict[str, Any] = {
            "phase": phase.value,
            "message": message,
            "conditions": conditions,
            "observedGeneration": gen,
            "retries": old.get("retries", 0) if retries is None else retries,
        }
        pls = old.get("placements") if placements is ... else placements
        status["placements"] = pls or None
        status["gpus"] = _gpus_held(pls or (), raw.get("spec") or {}) or None
        status["nodes"] = ",".join(sorted({p["node"] for p in pls or ()})) or None
        status["nextRetryTime"] = old.get("nextRetryTime") if next_retry is ... else next_retry
        return status

    def _write_status(self, raw: JSON, status: dict[str, Any], *,
                      precondition: bool = False) -> JSON:
        """Merge-patches status; with ``precondition`` only if the object is unchanged
        since ``raw`` was read (resourceVersion), else Conflict."""
        old = raw.get("status") or {}
        if not precondition and _same(old, status):
            return raw
        meta = raw["metadata"]
        body: dict[str, Any] = {"status": status}
        if precondition:
            body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        written = self.client.patch(API_VERSION, "GPUWorkload", meta["name"], body,
                                    namespace=meta["namespace"], patch_type="merge",
                                    subresource="status")
        if self.state is not None:
            self.state.wrote(written)
        return written

    def _ensure(self, obj: dict[str, Any]) -> bool:
        """Creates ``obj``; True if created, False if it already existed."""
        try:
            self.client.create(obj)
            return True
        except AlreadyExists:
            return False

    def _force_delete_on(self, raw: JSON, nodes: list[str]) -> None:
        """Pods of this workload on nodes that are gone: no kubelet will ever confirm
        their graceful deletion, so delete them at once (as the pod GC would, later),
        freeing their deterministic names for the next attempt."""
        name = raw["metadata"]["name"]
        for node in nodes:
            for pod in self.pods.by_index(NODE_NAME_INDEX, node):
                meta = pod.get("metadata") or {}
                if meta.get("namespace") != raw["metadata"]["namespace"] or \
                        (meta.get("labels") or {}).get(ch.WORKLOAD_LABEL) != name:
                    continue
                with contextlib.suppress(NotFound):
                    self.client.delete("v1", "Pod", meta["name"], namespace=meta["namespace"],
                                       grace_period_seconds=0)

    def _delete_children(self, raw: JSON, *, keep_attempt: str | None = None,
                         only_unfinished: bool = False) -> None:
        uid = raw["metadata"]["uid"]
        for cache, api, kind in ((self.pods, "v1", "Pod"), (self.jobs, "batch/v1", "Job")):
            for obj in cache.by_index("owner-uid", uid):
                meta = obj.get("metadata") or {}
                if kind == "Pod" and any(o.get("kind") == "Job"
                                         for o in meta.get("ownerReferences") or ()):
                    continue
                if keep_attempt is not None and \
                        (meta.get("labels") or {}).get(ATTEMPT_LABEL, "0") == keep_attempt:
                    continue
                if only_unfinished and child_phase(obj) in ("Succeeded", "Failed"):
                    continue
                if meta.get("deletionTimestamp"):
                    continue
                try:
                    self.client.delete(api, kind, meta["name"], namespace=meta["namespace"],
                                       propagation_policy="Background")
                except NotFound:
                    pass
                except Conflict:
                    pass


def _key(raw: JSON) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _gpus_held(placements: Any, spec: JSON) -> int:
    """Distinct devices named (a map may share one between replicas), plus the
    counted GPUs of device-plugin replicas."""
    per_replica = spec.get("gpusPerReplica") or spec.get("gpuCount") or 1
    named = {(p["node"], d) for p in placements for d in p.get("devices") or ()}
    counted = sum(per_replica for p in placements if not p.get("devices"))
    return len(named) + counted


def _strip(conds: Any) -> list[tuple[Any, ...]]:
    return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in conds or ()]


def _same(old: JSON, new: JSON) -> bool:
    for k, v in new.items():
        if k == "conditions":
            if _strip(old.get(k)) != _strip(v):
                return False
        elif (old.get(k) if old.get(k) not in ([], "", None) else None) != \
                (v if v not in ([], "", None) else None):
            return False
    return True
