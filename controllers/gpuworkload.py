"""The GPUWorkload reconciler: a workload becomes a placement, then its children.

Devices are held by pods (docs/architecture.md, invariants 1 and 3): this reconciler
books decisions, creates pods, and *asks* pods to go; it never frees a device
itself. A device comes back when the last pod holding it is deleted or finishes.

One reconcile of ``namespace/name`` observes, decides, acts, then reports:

| observed                                  | what it does                                   |
| ----------------------------------------- | ---------------------------------------------- |
| gone                                      | releases its booking (its pods keep theirs)    |
| being deleted                             | deletes its children; removes our finalizer    |
|                                           | once none is left (``kubectl delete`` waits)   |
| spec invalid                              | ``Scheduled=False InvalidSpec``; pods kept     |
| Succeeded / Failed                        | releases its booking                           |
| preempted (told by the preemptor)         | deletes its children, back to Pending          |
| not placed                                | decides; books; commits (below); or says why   |
|                                           | nothing fits and applies the retry policy      |
| placed, nominated over preempted holders  | waits for their pods and Jobs to be gone       |
| placed                                    | creates missing children, aggregates phases;   |
|                                           | a failed replica, a lost node, a child that    |
|                                           | cannot be created end the attempt              |
| placed, ``dra``, manager without DRA      | left running as it is, ``Managed=False``       |
|                                           | (controllers/unmanaged.py)                     |

Commit points. One replica in Pod mode: the bound pod itself (its ``nodeName`` and
env cannot change after creation) — the status write that follows only reports.
Gangs and Job mode: ``status.placements``, written with the object's
resourceVersion before any child, because a half-created gang cannot be rebuilt
from its pods alone. A crash between two steps is repaired by the next reconcile
from what the API holds (our own pods of the current attempt are adopted, never
decided again).

The status is built by one ``StatusBuilder`` through the reconcile and written
once at its end, and not at all when nothing a user sees changed.

Beside this flow: ``child_api.py`` sends and reads back the children (created
once, adopted when ours, asked to go), ``finalizer.py`` holds our finalizer and
the deletion, ``reconcile_outcome.py`` what a reconcile reports.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError

from api.v1alpha1.changes import SPEC_CHANGED_REASON
from api.v1alpha1.keys import (
    ATTEMPT_LABEL,
    CHILDREN_FINALIZER,
    DEVICES_ANNOTATION,
    INDEX_LABEL,
    MIG_ANNOTATION,
    SHARE_ANNOTATION,
    SPEC_HASH_ANNOTATION,
)
from api.v1alpha1.types import (
    API_VERSION,
    DeviceExposure,
    GPUWorkload,
    Phase,
    Placement,
    SchedulingStrategy,
    WorkloadKind,
)
from controllers import children as ch
from controllers import unmanaged
from controllers.backstop import Backstop
from controllers.child_api import ChildAPI
from controllers.conditions import (
    FAILED,
    PREEMPTED,
    READY,
    SCHEDULED,
    aggregate,
    child_phase,
    get_condition,
)
from controllers.dra_availability import NOT_ENABLED
from controllers.finalizer import ChildrenFinalizer
from controllers.placement_state import PlacementState, PodBook
from controllers.queue_wait import wait_in_queue
from controllers.reconcile_outcome import EndAttempt, Outcome
from controllers.status import (
    StatusBuilder,
    fmt_time,
    parse_time,
    same_status,
)
from controllers.status_writer import StatusWriter
from internal import metrics as m
from internal.backoff import next_delay, should_retry
from internal.objects import JSON, object_key
from internal.scheduling.framework import INVALID_MAP, PREEMPT, UNSCHEDULABLE
from internal.scheduling.jobs import is_job_holder, job_finished
from internal.scheduling.ledger import DEPARTING
from internal.scheduling.pods import BadPod, parse_devices, pod_is_active
from runtime import Conflict, Request, Result
from runtime.events import EventRecorder
from runtime.store import Indexer

log = structlog.get_logger("gpuworkload")

#: a lower-priority workload waits this long for a never-tried higher one to go first
PRIORITY_GATE_DELAY = 0.2
#: condition type set False when status.placements was edited by someone else
PLACEMENT_TRUSTED = "PlacementTrusted"



def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Options:
    default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES
    default_strategy: str | None = None  # used when a spec names none (else leastLoaded)
    #: before placing a spec, why the API server would refuse its children (None:
    #: it would not); controllers/template_check.py. None: not checked
    check_children: Callable[[GPUWorkload, JSON], str | None] | None = None


class GPUWorkloadReconciler:
    def __init__(self, client: Any, recorder: EventRecorder, workloads: Indexer,
                 pods: Indexer, jobs: Indexer, state_factory: Callable[[], PlacementState],
                 options: Options | None = None, clock: Callable[[], datetime] = _now,
                 rng: random.Random | None = None,
                 status_writer: StatusWriter | None = None,
                 backstop: Backstop | None = None) -> None:
        self.client = client
        #: reconciles unsettled workloads nobody looked at for a while, and counts
        #: those that were owed (a lost requeue); None: no backstop
        self.backstop = backstop
        #: writes every status but a gang's commit, off the workers' client (None:
        #: written synchronously by the worker, on ``client``)
        self.status_writer = status_writer
        #: the children in the API: listed, created, asked to go
        self.children = ChildAPI(client, pods, jobs, self.ensure_state)
        #: children created and not yet seen by the informer
        self.expectations = self.children.expectations
        self.finalizer = ChildrenFinalizer(client, self.children, status_writer,
                                           self._release, self._wrote,
                                           children_gone=self._finalized)
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
        #: ``deviceExposure: dra``: the ResourceClaims of replicas (controllers/claims.py);
        #: None while DRA is off
        self.claims: Any = None
        #: why DRA is off (a sentence), while ``claims`` is None
        self.dra_why = NOT_ENABLED

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

    def _release(self, key: str) -> None:
        """Releases ``key``'s booking (its pods keep what they hold). Called in the
        workload's own reconcile: whatever child it made is in the ledger already."""
        self.ensure_state().forget(key)
        self._bound_observed.discard(key)

    def _children_gone(self, raw: JSON) -> None:
        """A preemption's victim holds on to its devices (``PlacementState.depart``:
        its booking was released by another workload's decision, while a reconcile
        of its own may have been creating a child) until none of its children is
        left or being made: then they go (docs/architecture.md, invariant 3)."""
        state = self.ensure_state()
        key = object_key(raw)
        if not state.departing(key):
            return
        uid = raw["metadata"]["uid"]
        if not any(pod_is_active(p) for p in self.children.known(uid, "Pod")) and \
                all(job_finished(j) for j in self.children.known(uid, "Job")):
            state.departed(key)

    def _wrote(self, obj: JSON) -> None:
        if self.state is not None:
            self.state.wrote(obj)

    def reconcile(self, req: Request) -> Result | None:
        state = self.ensure_state()
        key = f"{req.namespace}/{req.name}"
        raw = self.workloads.get_by_name(req.name, req.namespace)
        if raw is None:
            state.forget(key, departed=True)
            self._bound_observed.discard(key)
            if self.status_writer is not None:
                self.status_writer.forget(key)
            if self.backstop is not None:
                self.backstop.forget(key)
            return None
        state.release_if_other_object(key, raw["metadata"].get("uid"))
        if raw["metadata"].get("deletionTimestamp"):
            return self.finalizer.finalize(raw)
        view = self.status_writer.view(raw) if self.status_writer is not None else None
        if view is not None:
            raw = view  # the status we last asked for, not yet in the cache
        elif state.is_behind(raw):
            # The cache has not caught up with our own last write of this object.
            return Result(requeue_after=0.1)
        out = self._observe_and_act(raw)
        return self._report(raw, out)

    def _finalized(self, raw: JSON) -> None:
        self._children_gone(raw)
        self._claims_left(raw)

    def _observe_and_act(self, raw: JSON) -> Outcome:
        state = self.ensure_state()
        key = object_key(raw)
        self._children_gone(raw)
        status = StatusBuilder(raw, self.clock())
        try:
            w = GPUWorkload.model_validate(raw)
        except ValidationError as exc:
            errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return _invalid_spec(raw, status, f"invalid spec: {errs}")
        if w.spec.scheduling_strategy is None:  # the manager's --default-strategy
            w.spec.scheduling_strategy = SchedulingStrategy(
                self.options.default_strategy or SchedulingStrategy.LEAST_LOADED.value)
        status.strategy(w.spec.scheduling_strategy.value)
        if w.spec.device_exposure is None:
            w.spec.device_exposure = self.options.default_exposure  # the filters read it
        if self.claims is not None or w.spec.device_exposure is not DeviceExposure.DRA:
            unmanaged.managed_again(raw, status)
        if w.status.phase in (Phase.SUCCEEDED, Phase.FAILED):
            state.forget(key)
            return Outcome(status)
        eviction = state.eviction(key)
        if eviction is not None:
            return self._evicted(raw, status, eviction)
        try:
            placements = self._placements(w, raw)
        except EndAttempt as end:
            return self._end_attempt(w, raw, status, end.reason, end.message)
        check = self.options.check_children
        if placements is None and check is not None and (why := check(w, raw)) is not None:
            return _invalid_spec(raw, status, f"invalid spec: {why}")
        if placements is None:
            waiting = self._previous_attempt(w, raw, status)
            return waiting if waiting is not None else self._place(w, raw, status)
        booking = state.booking(key)
        if booking is not None and _shape(booking.placements) != _shape(placements):
            # status.placements says something this controller did not book (edited
            # by hand, or forged): never acted on; what was booked wins.
            msg = (f"status.placements does not match what the controller booked "
                   f"({_describe(booking.placements)}); the edit is ignored")
            out = Outcome(status.condition(PLACEMENT_TRUSTED, False, "PlacementNotBooked", msg))
            out.warn("PlacementNotBooked", msg)
            return self._run_or_end(w, raw, status, list(booking.placements), out)
        if booking is None and not state.adopt(raw):
            # A committed placement this ledger did not hold (a write whose answer
            # was lost, a previous leader, a forged one) that collides with what runs
            # now: what runs wins.
            return self._end_attempt(w, raw, status, "PlacementConflict",
                                     "its devices are held by another workload's pods")
        return self._run_or_end(w, raw, status, placements)

    def _placements(self, w: GPUWorkload, raw: JSON) -> list[Placement] | None:
        """This attempt's placement: committed in status; else our committed booking
        (the pod was created, the cache has not caught up); else read back from our
        own pods of this attempt (a one-replica pod is its own commit point). A pod
        read back onto devices other owners hold raises ``EndAttempt`` (what runs
        wins, as for a committed status that collides)."""
        if w.status.placements:
            return list(w.status.placements)
        state = self.ensure_state()
        booking = state.booking(w.key)
        if booking is not None and booking.committed and booking.placements:
            return list(booking.placements)
        adopted = self._placements_from_pods(w, raw)
        if adopted:
            if not state.adopt({**raw, "status": {**(raw.get("status") or {}),
                                                  "placements": [p.model_dump(by_alias=True)
                                                                 for p in adopted]}}):
                raise EndAttempt("PlacementConflict",
                                 "its devices are held by another workload's pods")
            return adopted
        return None

    def _placements_from_pods(self, w: GPUWorkload, raw: JSON) -> list[Placement]:
        if not self._pod_is_commit_point(w):
            return []
        preempted = get_condition(raw.get("status") or {}, PREEMPTED) or {}
        if preempted.get("status") == "True":
            return []  # its pods were asked to go; they are not this attempt's record
        attempt = str(w.status.retries)
        out = []
        for pod in self.pods.by_index("owner-uid", raw["metadata"]["uid"]):
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            if labels.get(ATTEMPT_LABEL, "0") != attempt or not node or \
                    meta.get("deletionTimestamp"):
                continue
            try:
                devices = parse_devices((meta.get("annotations") or {}).get(DEVICES_ANNOTATION))
                index = int(labels.get(INDEX_LABEL, "0"))
            except (BadPod, ValueError):
                continue
            ann = meta.get("annotations") or {}
            out.append(Placement(index=index, node=node, devices=devices or [],
                                 share=ann.get(SHARE_ANNOTATION), mig=ann.get(MIG_ANNOTATION)))
        return out[:1]

    # ---------------------------------------------------------------- placing

    def _previous_attempt(self, w: GPUWorkload, raw: JSON,
                          status: StatusBuilder) -> Outcome | None:
        """A new attempt starts once the previous attempt's children are gone: their
        names are the new ones', and their devices stay theirs until then. Waiting
        for our own pods spends no retry; their deletion wakes the workload."""
        kind = "Job" if w.spec.workload_kind is WorkloadKind.JOB else "Pod"
        mine, stale = self.children.by_attempt(raw, kind, str(w.status.retries))
        # Preempted and not placed again: any child of its own is one its eviction
        # missed (made by a reconcile in flight when it was chosen as a victim).
        preempted = (get_condition(raw.get("status") or {}, PREEMPTED) or {}).get(
            "status") == "True"
        if not stale and not (preempted and mine):
            return None
        self.children.delete(raw, keep_attempt=None if preempted else str(w.status.retries))
        self.ensure_state().block(w.key)
        msg = "waiting for the previous attempt's pods to terminate"
        # no retry is spent here; the ended attempt's nextRetryTime still holds
        status.placements(None).phase(Phase.PENDING, msg)
        return Outcome(status, Result(requeue_after=5.0))

    def _place(self, w: GPUWorkload, raw: JSON, status: StatusBuilder) -> Outcome:
        state = self.ensure_state()
        key = w.key
        due_at = parse_time((raw.get("status") or {}).get("nextRetryTime"))
        ended = (get_condition(raw.get("status") or {}, SCHEDULED) or {}).get("reason")
        if due_at is not None and ended != UNSCHEDULABLE and self.clock() < due_at:
            # An ended attempt's retry waits out its backoff (retryPolicy), whatever
            # wakes the workload earlier (its own status write, freed capacity).
            return Outcome(status, Result(requeue_after=(due_at - self.clock()).total_seconds()))
        if state.higher_priority_fresh(key, w.spec.priority):
            return Outcome(status, Result(requeue_after=PRIORITY_GATE_DELAY))
        writer = self.status_writer
        # the commit below is a precondition on this copy's resourceVersion: nothing
        # of ours may be pending, in flight or ahead of the cache (a write still in
        # flight could land after the commit: no commit now)
        if writer is not None and not self._pod_is_commit_point(w) and \
                (not writer.settle(key) or writer.ahead_of(raw)):
            return Outcome(status, Result(requeue_after=0.1))
        started = time.perf_counter()
        decision = state.decide(w)
        strategy = decision.strategy
        m.DECISION_LATENCY.labels(strategy).observe(time.perf_counter() - started)
        log.debug("placement.decided", workload=key, outcome=decision.outcome,
                  strategy=strategy, nodes=decision.nodes, visited=decision.visited)

        if decision.ok or decision.outcome == PREEMPT:
            preempting = decision.outcome == PREEMPT
            m.SCHEDULING_ATTEMPTS.labels(strategy, "preempting" if preempting
                                         else "scheduled").inc()
            if preempting:
                m.PREEMPTIONS.inc(len(decision.victims))
                log.info("placement.preempting", workload=key, victims=decision.victims)
            placements = [p.model_dump(by_alias=True) for p in decision.placements]
            _, starting = aggregate({}, w.spec.replicas)
            status.placements(placements).retry(next_retry=None)
            # a restarted controller books the nomination again from the status
            status.nominated(decision.overlap if preempting else None)
            status.phase(Phase.SCHEDULED, starting)
            status.condition(SCHEDULED, True, "Scheduled", decision.message)
            status.condition(READY, False, "Starting", starting)
            if get_condition(raw.get("status") or {}, PREEMPTED):
                status.condition(PREEMPTED, False, "PlacedAgain", decision.message)
            out = Outcome(status).normal("Preempting" if preempting else "Scheduled",
                                         decision.message)
            if not ((w.spec.template or {}).get("spec") or {}).get("containers"):
                out.normal("DefaultTemplate", f"spec.template names no container: each "
                           f"replica runs one container main, image {ch.DEFAULT_IMAGE}")
            if self._pod_is_commit_point(w):
                if preempting:
                    state.commit(key)  # nominated: reported, its pod created later
                return self._run_or_end(w, raw, status, list(decision.placements), out,
                                        fresh=not preempting)
            try:
                raw = self._write_status(raw, status.build(), precondition=True)
            except Exception:
                state.forget(key)  # the booking was never committed: release it
                raise
            state.commit(key)
            if writer is not None:
                writer.record(raw)
            log.info("placement.committed", workload=key, strategy=strategy,
                     placements=";".join(f"{p.index}={p.node}:{','.join(map(str, p.devices))}"
                                         for p in decision.placements))
            status.old = raw.get("status") or {}
            out.raw = raw
            return self._run_or_end(GPUWorkload.model_validate(raw), raw, status,
                                    list(decision.placements), out)

        if decision.outcome == INVALID_MAP:
            m.SCHEDULING_ATTEMPTS.labels(strategy, "invalid").inc()
            # a user error: retried when the spec changes, not before
            return self._unplaced(raw, status, "InvalidSchedulingMap", decision.message)

        m.SCHEDULING_ATTEMPTS.labels(strategy, "unschedulable").inc()
        if decision.queue is not None or decision.wait_reason:
            return wait_in_queue(raw, status, decision)  # no retry spent
        return self._unschedulable(w, raw, status, decision.message)

    @staticmethod
    def _pod_is_commit_point(w: GPUWorkload) -> bool:
        return w.spec.replicas == 1 and w.spec.workload_kind is not WorkloadKind.JOB

    def _unschedulable(self, w: GPUWorkload, raw: JSON, status: StatusBuilder,
                       message: str) -> Outcome:
        """Nothing fits. Attempts on the retry timer count as retries; attempts woken
        early by freed capacity do not. ``maxRetries: 0`` fails at once."""
        now = self.clock()
        policy = w.spec.retry_policy
        due_at = parse_time((raw.get("status") or {}).get("nextRetryTime"))
        retries = w.status.retries
        if due_at is not None and now < due_at:
            out = self._unplaced(raw, status, UNSCHEDULABLE, message, warn=False)
            out.result = Result(requeue_after=(due_at - now).total_seconds())
            return out
        # Only a timer an unschedulable attempt set makes this a retry: an ended
        # attempt (a failed replica) already counted its retry when it ended.
        reason = (get_condition(raw.get("status") or {}, SCHEDULED) or {}).get("reason")
        on_timer = due_at is not None and reason == UNSCHEDULABLE
        if on_timer:
            retries += 1
            m.RETRIES.inc()
        if not should_retry(retries, policy) and (on_timer or retries == 0):
            why = (f"gave up after {retries} retries: {message}" if retries
                   else f"unschedulable and maxRetries is 0: {message}")
            return self._fail(raw, status, UNSCHEDULABLE, why, retries=retries)
        delay = next_delay(retries + 1, policy, self.rng)
        nxt = fmt_time(datetime.fromtimestamp(now.timestamp() + delay, UTC))
        status.retry(retries, nxt)
        out = self._unplaced(raw, status, UNSCHEDULABLE, message)
        out.result = Result(requeue_after=delay)
        return out

    def _unplaced(self, raw: JSON, status: StatusBuilder, reason: str, message: str, *,
                  warn: bool = True) -> Outcome:
        out = Outcome(status.placements(None).phase(Phase.PENDING, message)
                      .condition(SCHEDULED, False, reason, message))
        if warn or _changed_message(raw, message):
            out.warn("FailedScheduling" if reason == UNSCHEDULABLE else reason, message)
        return out

    def _evicted(self, raw: JSON, status: StatusBuilder, msg: str) -> Outcome:
        """The victim's side of a preemption: its booking was released by the
        preemptor; its children are asked to go (their devices stay nominated to the
        preemptor until they are gone); back to Pending."""
        self.children.delete(raw)
        self.ensure_state().evicted(object_key(raw))
        self._children_gone(raw)  # it had none: its devices go now
        status.placements(None).retry(next_retry=None).phase(Phase.PENDING, msg)
        status.condition(SCHEDULED, False, "Preempted", msg)
        status.condition(PREEMPTED, True, "Preempted", msg)
        status.condition(READY, False, "Preempted", msg)
        return Outcome(status).warn("Preempted", msg)

    # ---------------------------------------------------------------- running

    def _run_or_end(self, w: GPUWorkload, raw: JSON, status: StatusBuilder,
                    placements: list[Placement], out: Outcome | None = None, *,
                    fresh: bool = False) -> Outcome:
        out = out or Outcome(status)
        try:
            return self._run(w, raw, out, placements, fresh)
        except EndAttempt as end:
            ended = self._end_attempt(w, raw, status, end.reason, end.message,
                                      spend=end.spend)
            ended.events[:0] = [e for e in out.events if e[1] != "Scheduled"]
            ended.raw = out.raw  # the object as last written (a commit write's new version)
            return ended
        except Exception:
            if fresh:
                self.ensure_state().forget(w.key)  # no pod made it durable
            raise

    def _run(self, w: GPUWorkload, raw: JSON, out: Outcome, placements: list[Placement],
             fresh: bool) -> Outcome:
        state = self.ensure_state()
        key = w.key
        status = out.status
        meta = raw["metadata"]
        attempt = w.status.retries
        lost = sorted({p.node for p in placements if not state.has_node(p.node)})
        if lost:
            self.children.force_delete_on(raw, lost)
            raise EndAttempt("NodeLost", f"node(s) {', '.join(lost)} disappeared")
        status.placements([p.model_dump(by_alias=True) for p in placements])
        kind = "Job" if w.spec.workload_kind is WorkloadKind.JOB else "Pod"
        mine, stale = self.children.by_attempt(raw, kind, str(attempt))
        exposure = unmanaged.attempt_exposure(
            mine, w.spec.device_exposure or self.options.default_exposure)
        if exposure is DeviceExposure.DRA and self.claims is None:
            # before a spec change restarts it: its new pods could not be made
            return self._unmanaged(w, raw, out, mine, self._spec_change(w, placements, raw))
        changed = self._spec_change(w, placements, raw)
        if changed:
            raise EndAttempt(SPEC_CHANGED_REASON, f"spec changed ({changed}); restarting "
                             f"onto a new placement", spend=False)
        if self._wait_for_devices(key, placements, mine, out):
            return out
        status.nominated(None)  # nothing of the victims' is left on its devices
        state.nomination_done(key)
        _placed(status, placements)  # a waiting reason no longer describes the present
        if exposure is DeviceExposure.DEVICE_PLUGIN and any(p.devices for p in placements):
            # A map names devices, so the kubelet must not pick others.
            exposure = DeviceExposure.CUDA_VISIBLE_DEVICES
        if stale:
            # A previous attempt's children still go away; their names are ours to
            # reuse only once they are gone (and their devices stay theirs till then).
            self.children.delete(raw, keep_attempt=str(attempt))
            out.result = Result(requeue_after=0.5)
            return out
        if w.spec.replicas > 1:
            self.children.create(ch.build_service(w, raw), kind_word="headless Service")
        claims = self._claims(w, raw, placements, attempt, mine) \
            if exposure is DeviceExposure.DRA else {}
        if claims is None:
            out.result = Result(requeue_after=0.5)  # an older claim of that name goes first
            return out
        created_now = False
        for p in placements:
            if p.index in mine:
                continue
            if w.status.phase is Phase.RUNNING:
                # Not the workload's failure: a user's delete, an eviction, a removed
                # node. The gang restarts as a whole, and no retry is spent.
                raise EndAttempt("ReplicaDeleted", f"replica {p.index} on {p.node} was "
                                 f"deleted; the gang restarts", spend=False)
            child = ch.build_child(w, raw, p, exposure, state.uuids, attempt)
            if p.index in claims:
                child = self.claims.bind(child, claims[p.index])
            existing = self.children.create(child, kind_word=kind)
            if existing is None:
                created_now = True
                if fresh:
                    state.commit(key)  # the bound pod is the commit point
                    log.info("placement.committed", workload=key, node=p.node,
                             devices=",".join(map(str, p.devices)))
            else:
                child = existing
            mine[p.index] = child
        if created_now and key not in self._bound_observed:
            self._bound_observed.add(key)
            created = parse_time(meta.get("creationTimestamp"))
            if created is not None and w.status.retries == 0:
                m.CREATE_TO_BOUND.observe(max(0.0, (self.clock() - created).total_seconds()))

        phases = {i: child_phase(c) for i, c in mine.items() if i < w.spec.replicas}
        phase, message = aggregate(phases, w.spec.replicas)
        if phase is Phase.FAILED:
            raise EndAttempt("ReplicaFailed", message)
        status.phase(phase, message)
        if phase is Phase.SUCCEEDED:
            state.forget(key)
            status.condition(READY, False, "Succeeded", message)
        elif phase is Phase.RUNNING:
            status.condition(READY, True, "Running", message)
        else:
            status.condition(READY, False, "Starting", message)
        return out

    def _wait_for_devices(self, key: str, placements: list[Placement],
                          mine: Mapping[int, JSON], out: Outcome) -> bool:
        """Before a child is made on a device, every other holder of that device is
        gone (docs/architecture.md, invariants 2 and 3: devices, not workloads, are
        waited for): a preemptor's victims' pods and Jobs, whoever owns them now (an
        orphaned victim's pods are their own), and any pod that came to name the
        device after it was booked. True: wait (the condition says for what; a
        release of devices wakes it). Once every child exists nothing is waited for."""
        state = self.ensure_state()
        if all(p.index in mine for p in placements):
            return False
        victims = state.unacknowledged(key)
        blockers = state.blockers(key)
        if not victims and not blockers:
            return False
        booking = state.booking(key)
        nominated = bool(victims) or (booking is not None and bool(booking.overlap))
        reason = "WaitingForPreemption" if nominated else "WaitingForDevices"
        msg = _waiting_for(blockers, preempted=nominated) if blockers else \
            f"waiting for preempted {', '.join(victims)} to stop"
        out.status.phase(Phase.SCHEDULED, msg).condition(SCHEDULED, True, reason, msg)
        if not blockers:
            out.result = Result(requeue_after=1.0)  # an acknowledgement wakes nobody
        return True

    def _unmanaged(self, w: GPUWorkload, raw: JSON, out: Outcome,
                   mine: Mapping[int, JSON], changed: str) -> Outcome:
        """A ``dra`` attempt in a manager without DRA: never torn down
        (controllers/unmanaged.py). No retry is spent, nothing is requeued: its
        children's events, or a restart with DRA, wake it."""
        if not mine:
            self._release(w.key)
            ended = unmanaged.back_to_pending(out.status, self.dra_why)
            ended.events[:0] = out.events
            return ended
        report, done = unmanaged.leave_running(raw, out.status, w.spec.replicas, mine,
                                               self.dra_why, changed)
        if done:
            self.ensure_state().forget(w.key)
        report.events[:0] = out.events
        report.raw = out.raw
        return report

    def _claims_left(self, raw: JSON) -> None:
        """A dra workload deleted while this manager runs without DRA releases its
        claims once its pods are gone (controllers/unmanaged.py)."""
        if self.claims is None and self.dra_why == NOT_ENABLED:
            unmanaged.release_claims_of_deleted(self.client, self.recorder, raw,
                                                self.options.default_exposure)

    def _claims(self, w: GPUWorkload, raw: JSON, placements: list[Placement], attempt: int,
                mine: Mapping[int, JSON]) -> dict[int, str] | None:
        """``deviceExposure: dra``: each replica's claim, allocated to its devices
        before its pod exists (controllers/claims.py). None: wait and come back."""
        out: dict[int, str] = {}
        for p in placements:
            name = self.claims.ensure(w, raw, p, attempt, p.index in mine)
            if name is None:
                return None
            out[p.index] = name
        return out

    def _spec_change(self, w: GPUWorkload, placements: list[Placement], raw: JSON) -> str:
        """What changed in the spec since this attempt was placed ('' if nothing):
        the replica count, or the template its children were made from."""
        if len(placements) != w.spec.replicas:
            return f"replicas {len(placements)} -> {w.spec.replicas}"
        want = ch.spec_hash(w)
        kind = "Job" if w.spec.workload_kind is WorkloadKind.JOB else "Pod"
        mine, _ = self.children.by_attempt(raw, kind, str(w.status.retries))
        for child in mine.values():
            have = ((child.get("metadata") or {}).get("annotations") or {}).get(
                SPEC_HASH_ANNOTATION)
            if have and have != want:
                return "template"
        return ""

    def _end_attempt(self, w: GPUWorkload, raw: JSON, status: StatusBuilder, reason: str,
                     message: str, *, spend: bool = True) -> Outcome:
        """A replica failed, its node vanished, its child could not be made: ask its
        children to go (their devices stay held until they are gone), release the
        booking, then retry or fail. Without ``spend`` (a spec change, a replica
        deleted by someone else) it is placed again at once and no retry is spent."""
        self.children.delete(raw, only_unfinished=True)
        self._release(w.key)
        if not spend:
            status.placements(None).retry(next_retry=None).phase(Phase.PENDING, message)
            status.condition(SCHEDULED, False, reason, message)
            status.condition(READY, False, reason, message)
            return Outcome(status, Result(requeue_after=0.5)).warn(reason, message)
        retries = w.status.retries
        if not should_retry(retries, w.spec.retry_policy):
            return self._fail(raw, status, reason, f"{message}; no retries left "
                              f"(maxRetries {w.spec.retry_policy.max_retries})")
        retries += 1
        m.RETRIES.inc()
        delay = next_delay(retries, w.spec.retry_policy, self.rng)
        nxt = fmt_time(datetime.fromtimestamp(self.clock().timestamp() + delay, UTC))
        msg = f"{message}; retry {retries} of {w.spec.retry_policy.max_retries} in {delay:.0f}s"
        status.placements(None).retry(retries, nxt).phase(Phase.PENDING, msg)
        status.condition(SCHEDULED, False, reason, msg).condition(READY, False, reason, msg)
        return Outcome(status, Result(requeue_after=delay)).warn(reason, msg)

    def _fail(self, raw: JSON, status: StatusBuilder, reason: str, message: str,
              retries: int | None = None) -> Outcome:
        """Failed for good: ``Failed=True`` and ``Scheduled=False`` with the reason
        (``kubectl wait --for=condition=Scheduled=false`` finds it); an unschedulable
        workload's Event is ``FailedScheduling``, as every try before it."""
        self.ensure_state().forget(object_key(raw))
        m.FAILURES.labels(reason).inc()
        log.info("workload.failed", workload=object_key(raw), reason=reason, message=message)
        status.retry(retries, None).phase(Phase.FAILED, message)
        status.condition(FAILED, True, reason, message).condition(READY, False, reason, message)
        status.condition(SCHEDULED, False, reason, message)
        return Outcome(status).warn("FailedScheduling" if reason == UNSCHEDULABLE else reason,
                                    message)

    # ---------------------------------------------------------------- writing

    def _report(self, raw: JSON, out: Outcome) -> Result | None:
        """Writes the status once (when it changed), then the Events. With a status
        writer both are handed over and the worker goes on."""
        raw = out.raw or raw
        status = out.status.build()
        # the phase being written decides (a Failed workload gets no finalizer: its
        # intermediate cache event would book its devices again)
        finalize = bool(status.get("placements")) and status.get("phase") not in (
            Phase.SUCCEEDED.value, Phase.FAILED.value) and \
            CHILDREN_FINALIZER not in (raw["metadata"].get("finalizers") or ())
        if self.status_writer is not None:
            finalize = finalize and not self.status_writer.has_finalizer(raw)
        acted = finalize or not same_status(out.status.old, status)
        if self.backstop is not None:
            self.backstop.reconciled(object_key(raw), acted)
        if self.status_writer is not None:
            if acted:
                self.status_writer.submit(raw, status, finalizer=finalize)
        else:
            if finalize:
                try:
                    raw = self.finalizer.ensure(raw)
                except Conflict:
                    return Result(requeue_after=0.1)
            if not same_status(out.status.old, status):
                raw = self._write_status(raw, status)
        for type_, reason, message in out.events:
            if type_ == "Warning":
                self.recorder.warning(raw, reason, message)
            else:
                self.recorder.normal(raw, reason, message)
        return out.result

    def _write_status(self, raw: JSON, status: dict[str, Any], *,
                      precondition: bool = False) -> JSON:
        """Merge-patches status; with ``precondition`` only if the object is unchanged
        since ``raw`` was read (resourceVersion), else Conflict."""
        meta = raw["metadata"]
        body: dict[str, Any] = {"status": status}
        if precondition:
            body["metadata"] = {"resourceVersion": meta["resourceVersion"]}
        written = self.client.patch(API_VERSION, "GPUWorkload", meta["name"], body,
                                    namespace=meta["namespace"], patch_type="merge",
                                    subresource="status")
        self._wrote(written)
        return written


def _shape(placements: Any) -> list[tuple[int, str, tuple[int, ...]]]:
    return sorted((p.index, p.node, tuple(sorted(p.devices))) for p in placements)


def _describe(placements: Any) -> str:
    return "; ".join(f"{i}={n}:{','.join(map(str, d))}" for i, n, d in _shape(placements))


def _waiting_for(blockers: Mapping[str, list[str]], *, preempted: bool = True) -> str:
    """``waiting for 2 preempted pod(s) and 1 preempted Job(s) to terminate on n3``;
    not ``preempted``: ``waiting for 1 pod(s) holding its devices to terminate on n3``"""
    names = [n for v in blockers.values() for n in v]
    departing = sorted({n.removeprefix(DEPARTING) for n in names if n.startswith(DEPARTING)})
    names = [n for n in names if not n.startswith(DEPARTING)]
    jobs = sum(1 for n in names if is_job_holder(n))
    word = "preempted " if preempted else ""
    what = [f"{n} {word}{kind}(s)" for n, kind in ((len(names) - jobs, "pod"),
                                                   (jobs, "Job")) if n]
    if not what:  # only what a victim holds on to until it sees its children gone
        return (f"waiting for preempted {', '.join(departing)} to see its children gone "
                f"on {', '.join(sorted(blockers))}")
    held = "" if preempted else " holding its devices"
    return (f"waiting for {' and '.join(what)}{held} to terminate on "
            f"{', '.join(sorted(blockers))}")


#: Scheduled=True reasons that describe a wait before the children are made
WAITING_REASONS = ("WaitingForPreemption", "WaitingForDevices")


def _placed(status: StatusBuilder, placements: list[Placement]) -> None:
    """Nothing is waited for any more: a ``Scheduled`` condition still saying what
    was waited for becomes the placement's (reason ``Scheduled``, as a placement
    that waited for nothing has it, and the same message naming the nodes)."""
    current = get_condition(status.status, SCHEDULED) or {}
    if current.get("reason") in WAITING_REASONS:
        nodes = ", ".join(sorted({p.node for p in placements}))
        status.condition(SCHEDULED, True, "Scheduled",
                         f"placed {len(placements)} replica(s) on {nodes}")


def _invalid_spec(raw: JSON, status: StatusBuilder, message: str) -> Outcome:
    """A spec that can never be placed: said once (condition and Event), no retry
    spent. Its pods, if any, keep holding their devices: the ledger follows them."""
    status.phase(Phase.PENDING, message).condition(SCHEDULED, False, "InvalidSpec", message)
    out = Outcome(status)
    return out.warn("InvalidSpec", message) if _changed_message(raw, message) else out


def _changed_message(raw: JSON, message: str) -> bool:
    current = get_condition(raw.get("status") or {}, SCHEDULED) or {}
    return current.get("message") != message
