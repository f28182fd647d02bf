"""Placing a GPUWorkload that has no placement: decide, book, commit, or say why not.

``Placer.place`` waits out an ended attempt's backoff and the priority gate, asks
the placement state for a decision (booked in the ledger under the workload's
attempt), and commits it: one replica in Pod mode is committed by its bound pod
(``AttemptRunner.run_or_end`` creates it at once); a gang or a Job's placement is
written to ``status.placements`` with the object's resourceVersion first
(docs/architecture.md, step 4). Nothing fits: ``Scheduled=False Unschedulable`` and
the retry policy, or, in a GPUQueue, a wait that spends no retry
(controllers/queues/wait.py). Also here: the wait for a previous attempt's children
(``previous_attempt``), the victim's side of a preemption (``evicted``), and the
end of what a victim held on to once its children are gone (``children_gone``).

The placement state is the reconcile's (fetched once per reconcile and passed in).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import structlog

from api.v1alpha1.types import GPUWorkload, Phase, WorkloadKind
from controllers.gpuworkload import children as ch
from controllers.gpuworkload.attempt import AttemptRunner, child_kind
from controllers.gpuworkload.child_api import ChildAPI
from controllers.gpuworkload.reconcile_outcome import Outcome
from controllers.placement.state import PlacementState
from controllers.queues.wait import wait_in_queue
from controllers.shared.own_writes import OwnWrites
from controllers.status.builder import StatusBuilder, parse_time
from controllers.status.conditions import (
    PREEMPTED,
    READY,
    SCHEDULED,
    aggregate,
    get_condition,
)
from controllers.status.writer import StatusWriter
from internal import metrics as m
from internal.backoff import should_retry
from internal.objects import JSON, object_key
from internal.scheduling.framework import INVALID_MAP, PREEMPT, UNSCHEDULABLE
from internal.scheduling.jobs import job_finished
from internal.scheduling.pods import pod_is_active
from runtime import Result

log = structlog.get_logger("gpuworkload")

#: a lower-priority workload waits this long for a never-tried higher one to go first
PRIORITY_GATE_DELAY = 0.2

#: writes a status (merge patch), with the resourceVersion as a precondition when
#: asked; returns the object written
WriteStatus = Callable[..., JSON]


def pod_is_commit_point(w: GPUWorkload) -> bool:
    """One replica in Pod mode: its bound pod is the commit point."""
    return w.spec.replicas == 1 and w.spec.workload_kind is not WorkloadKind.JOB


class Placer:
    def __init__(self, children: ChildAPI, attempts: AttemptRunner,
                 status_writer: StatusWriter | None, write_status: WriteStatus,
                 own_writes: OwnWrites, clock: Callable[[], datetime],
                 cached: Callable[[str], JSON | None] | None = None) -> None:
        self.children = children
        #: a workload as the informer's cache holds it (None: not there), which the
        #: priority gate asks before it waits behind one (None: it takes the
        #: pending set's word)
        self.cached = cached
        self.attempts = attempts
        self.status_writer = status_writer
        #: our writes the cache has not shown yet (the commit's among them)
        self.own_writes = own_writes
        self.write_status = write_status
        self.clock = clock

    def previous_attempt(self, state: PlacementState, w: GPUWorkload, raw: JSON,
                         status: StatusBuilder) -> Outcome | None:
        """A new attempt starts once the previous attempt's children are gone: their
        names are the new ones', and their devices stay theirs until then. Waiting
        for our own pods spends no retry; their deletion wakes the workload."""
        mine, stale = self.children.by_attempt(raw, child_kind(w), str(w.status.retries))
        # Preempted and not placed again: any child of its own is one its eviction
        # missed (made by a reconcile in flight when it was chosen as a victim).
        preempted = (get_condition(raw.get("status") or {}, PREEMPTED) or {}).get(
            "status") == "True"
        if not stale and not (preempted and mine):
            return None
        self.children.delete(raw, keep_attempt=None if preempted else str(w.status.retries))
        state.block(w.key)
        msg = "waiting for the previous attempt's pods to terminate"
        # no retry is spent here; the ended attempt's nextRetryTime still holds
        status.placements(None).phase(Phase.PENDING, msg)
        return Outcome(status, Result(requeue_after=5.0))

    def place(self, state: PlacementState, w: GPUWorkload, raw: JSON,
              status: StatusBuilder) -> Outcome:
        key = w.key
        due_at = parse_time((raw.get("status") or {}).get("nextRetryTime"))
        ended = (get_condition(raw.get("status") or {}, SCHEDULED) or {}).get("reason")
        if due_at is not None and ended != UNSCHEDULABLE and self.clock() < due_at:
            # An ended attempt's retry waits out its backoff (retryPolicy), whatever
            # wakes the workload earlier (its own status write, freed capacity).
            return Outcome(status, Result(requeue_after=(due_at - self.clock()).total_seconds()))
        ahead = state.higher_priority_fresh(key, w.spec.priority, self.cached)
        if ahead is not None:
            log.debug("placement.priority_gate", workload=key, waits_for=ahead)
            return Outcome(status, Result(requeue_after=PRIORITY_GATE_DELAY))
        writer = self.status_writer
        # the commit below is a precondition on this copy's resourceVersion: nothing
        # of ours may be pending, in flight or ahead of the cache (a write still in
        # flight could land after the commit: no commit now)
        if writer is not None and not pod_is_commit_point(w):
            asked = self.own_writes.view(raw) is not None  # a status of ours, not cached yet
            if not writer.settle(key) or self.own_writes.ahead_of(raw):
                log.debug("placement.commit_waits", workload=key,
                          why="a status write of ours in flight or ahead of the cache")
                return Outcome(status, Result(requeue_after=0.1))
            if asked and self.own_writes.view(raw) is None:
                # settle dropped the status this reconcile started from: the API never
                # got it, so whatever is decided now is written, even the same again
                log.debug("placement.status_dropped", workload=key,
                          effect="what is decided now is written")
                status.old = {}
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
            if pod_is_commit_point(w):
                if preempting:
                    state.commit(key)  # nominated: reported, its pod created later
                return self.attempts.run_or_end(state, w, raw, status,
                                                list(decision.placements), out,
                                                fresh=not preempting,
                                                blocked=decision.blocked)
            try:
                raw = self.write_status(raw, status.build(), precondition=True)
            except Exception:
                state.forget(key)  # the booking was never committed: release it
                raise
            # durable now; committed in the cache with its children's holdings
            # (run_or_end, ``written``): one section for both
            if writer is not None:  # read your writes: the commit's status
                self.own_writes.wrote(raw, status=raw.get("status") or {})
            log.info("placement.committed", workload=key, strategy=strategy,
                     placements=";".join(f"{p.index}={p.node}:{','.join(map(str, p.devices))}"
                                         for p in decision.placements))
            status.old = raw.get("status") or {}
            out.raw = raw
            try:
                placed = GPUWorkload.model_validate(raw)
            except Exception:
                state.commit(key)  # durable: committed, whatever the answer said
                raise
            return self.attempts.run_or_end(state, placed, raw, status,
                                            list(decision.placements), out,
                                            written=True, blocked=decision.blocked)

        if decision.outcome == INVALID_MAP:
            m.SCHEDULING_ATTEMPTS.labels(strategy, "invalid").inc()
            # a user error: retried when the spec changes, not before
            return self._unplaced(raw, status, "InvalidSchedulingMap", decision.message)

        m.SCHEDULING_ATTEMPTS.labels(strategy, "unschedulable").inc()
        if decision.queue is not None or decision.wait_reason:
            return wait_in_queue(raw, status, decision)  # no retry spent
        return self._unschedulable(state, w, raw, status, decision.message)

    def _unschedulable(self, state: PlacementState, w: GPUWorkload, raw: JSON,
                       status: StatusBuilder, message: str) -> Outcome:
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
            return self.attempts.fail(state, raw, status, UNSCHEDULABLE, why, retries=retries)
        delay, nxt = self.attempts.next_retry(retries + 1, policy, now)
        status.retry(retries, nxt)
        out = self._unplaced(raw, status, UNSCHEDULABLE, message)
        out.result = Result(requeue_after=delay)
        return out

    def _unplaced(self, raw: JSON, status: StatusBuilder, reason: str, message: str, *,
                  warn: bool = True) -> Outcome:
        out = Outcome(status.placements(None).phase(Phase.PENDING, message)
                      .condition(SCHEDULED, False, reason, message))
        if warn or changed_message(raw, message):
            out.warn("FailedScheduling" if reason == UNSCHEDULABLE else reason, message)
        return out

    def evicted(self, state: PlacementState, raw: JSON, status: StatusBuilder,
                msg: str) -> Outcome:
        """The victim's side of a preemption: its booking was released by the
        preemptor; its children are asked to go (their devices stay nominated to the
        preemptor until they are gone); back to Pending."""
        self.children.delete(raw)
        state.evicted(object_key(raw))
        self.children_gone(state, raw)  # it had none: its devices go now
        status.placements(None).retry(next_retry=None).phase(Phase.PENDING, msg)
        status.condition(SCHEDULED, False, "Preempted", msg)
        status.condition(PREEMPTED, True, "Preempted", msg)
        status.condition(READY, False, "Preempted", msg)
        return Outcome(status).warn("Preempted", msg)

    def children_gone(self, state: PlacementState, raw: JSON,
                      departing: bool | None = None) -> None:
        """A preemption's victim holds on to its devices (``PlacementState.depart``:
        its booking was released by another workload's decision, while a reconcile
        of its own may have been creating a child) until none of its children is
        left or being made (the cache's, and those we created that it does not show
        yet: ``ChildAPI.known``): then they go (docs/architecture.md, invariant 3).
        ``departing``: already read (``PlacementState.standing_of``); None: asked here."""
        key = object_key(raw)
        if not (state.departing(key) if departing is None else departing):
            return
        uid = raw["metadata"]["uid"]
        if not any(pod_is_active(p) for p in self.children.known(uid, "Pod")) and \
                all(job_finished(j) for j in self.children.known(uid, "Job")):
            state.departed(key)


def changed_message(raw: JSON, message: str) -> bool:
    """Does ``message`` differ from the one the ``Scheduled`` condition holds now?"""
    current = get_condition(raw.get("status") or {}, SCHEDULED) or {}
    return current.get("message") != message
