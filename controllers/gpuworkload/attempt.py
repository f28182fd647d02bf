"""Running one attempt of a placed GPUWorkload, and ending it.

``AttemptRunner.run_or_end`` takes a placement (committed, or about to be by its
first pod) and makes what runs match it: the children that are missing are
created (after every other holder of their devices is gone), the children's
phases are aggregated into the status. An attempt that cannot go on (a failed
replica, a lost node, a child that cannot be created, a spec change) ends here
(``end_attempt``): its children are asked to go, its booking is released, and the
retry policy says when the next attempt may start, or that the workload failed
(``fail``).

The placement state is the reconcile's (fetched once per reconcile and passed in).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from api.v1alpha1.changes import SPEC_CHANGED_REASON
from api.v1alpha1.keys import SPEC_HASH_ANNOTATION
from api.v1alpha1.types import (
    DeviceExposure,
    GPUWorkload,
    Phase,
    Placement,
    RetryPolicy,
    WorkloadKind,
)
from controllers.gpuworkload import children as ch
from controllers.gpuworkload import unmanaged
from controllers.gpuworkload.child_api import ChildAPI
from controllers.gpuworkload.job_pods import pods_of_job
from controllers.gpuworkload.options import Options
from controllers.gpuworkload.reconcile_outcome import EndAttempt, Outcome
from controllers.placement.standing import uuids_of
from controllers.placement.state import PlacementState
from controllers.status.builder import StatusBuilder, fmt_time, parse_time
from controllers.status.conditions import (
    FAILED,
    READY,
    SCHEDULED,
    aggregate,
    get_condition,
)
from internal import metrics as m
from internal.backoff import next_delay, should_retry
from internal.objects import JSON, object_key
from internal.scheduling.framework import UNSCHEDULABLE
from internal.scheduling.jobs import is_job_holder
from internal.scheduling.ledger import DEPARTING
from internal.scheduling.rejections import AVOID_SECONDS, kubelet_rejection, live
from runtime import Result

if TYPE_CHECKING:
    from controllers.dra.claims import ClaimManager
    from internal.scheduling.snapshot import NodeInfo

log = structlog.get_logger("gpuworkload")

#: the reason of an attempt ended by a pod the kubelet rejected at admission
REJECTED_REASON = "PodRejected"
#: Scheduled=True reasons that describe a wait before the children are made
WAITING_REASONS = ("WaitingForPreemption", "WaitingForDevices")


def child_kind(w: GPUWorkload) -> str:
    return "Job" if w.spec.workload_kind is WorkloadKind.JOB else "Pod"


class AttemptRunner:
    def __init__(self, children: ChildAPI, claims: ClaimManager | None,
                 options: Options, dra_why: str, clock: Callable[[], datetime],
                 rng: random.Random) -> None:
        self.children = children
        #: ``deviceExposure: dra``: the ResourceClaims of replicas (None: DRA is off)
        self.claims = claims
        self.options = options
        #: why DRA is off (a sentence), while ``claims`` is None
        self.dra_why = dra_why
        self.clock = clock
        self.rng = rng
        #: workloads whose first pod's create-to-bound latency was observed
        self._bound_observed: set[str] = set()

    def release(self, state: PlacementState, key: str, *, departed: bool = False) -> None:
        """Releases ``key``'s booking (its pods keep what they hold); ``departed``:
        the workload is gone, and what it held on to after a preemption goes too."""
        state.forget(key, departed=departed)
        self._bound_observed.discard(key)

    def run_or_end(self, state: PlacementState, w: GPUWorkload, raw: JSON,
                   status: StatusBuilder, placements: list[Placement],
                   out: Outcome | None = None, *, fresh: bool = False,
                   written: bool = False,
                   blocked: dict[str, list[str]] | None = None) -> Outcome:
        """Runs the attempt on ``placements``; ends it if it cannot go on. ``fresh``:
        decided in this reconcile and not committed (its first pod commits it).
        ``written``: decided in this reconcile and made durable by its status write,
        not committed in the cache yet: committed in the section that holds its
        children, else (nothing created, the attempt ended, a create raised) before
        this returns. ``blocked``: what its devices waited for when it was booked in
        this reconcile (``Decision.blocked``; None: ask the cache)."""
        out = out or Outcome(status)
        pending = _Commit(w.key) if written else None
        try:
            done = self._run(state, w, raw, out, placements, fresh, blocked, pending)
        except EndAttempt as end:
            if pending is not None:
                pending.now(state)  # durable: committed, then ended as any attempt
            ended = self.end_attempt(state, w, raw, status, end.reason, end.message,
                                     spend=end.spend)
            ended.events[:0] = [e for e in out.events if e[1] != "Scheduled"]
            ended.raw = out.raw  # the object as last written (a commit write's new version)
            return ended
        except Exception:
            if fresh:
                state.forget(w.key)  # no pod made it durable
            elif pending is not None:
                pending.now(state)  # its status made it durable
            raise
        if pending is not None:
            pending.now(state)
        return done

    def _run(self, state: PlacementState, w: GPUWorkload, raw: JSON, out: Outcome,
             placements: list[Placement], fresh: bool,
             blocked: dict[str, list[str]] | None = None,
             pending: _Commit | None = None) -> Outcome:
        key = w.key
        status = out.status
        meta = raw["metadata"]
        attempt = w.status.retries
        nodes = state.node_records({p.node for p in placements})
        lost = sorted({p.node for p in placements if p.node not in nodes})
        if lost:
            self.children.force_delete_on(raw, lost)
            raise EndAttempt("NodeLost", f"node(s) {', '.join(lost)} disappeared")
        status.placements([p.model_dump(by_alias=True) for p in placements])
        kind = child_kind(w)
        mine, stale = self.children.by_attempt(raw, kind, str(attempt))
        exposure = unmanaged.attempt_exposure(
            mine, w.spec.device_exposure or self.options.default_exposure)
        if exposure is DeviceExposure.DRA and self.claims is None:
            # before a spec change restarts it: its new pods could not be made
            return self._unmanaged(state, w, raw, out, mine,
                                   self.spec_change(w, placements, mine))
        changed = self.spec_change(w, placements, mine)
        if changed:
            raise EndAttempt(SPEC_CHANGED_REASON, f"spec changed ({changed}); restarting "
                             f"onto a new placement", spend=False)
        if self._wait_for_devices(state, key, placements, mine, out, blocked):
            return out
        status.nominated(None)  # nothing of the victims' is left on its devices
        if w.status.nominated_over and all(p.index in mine for p in placements):
            state.nomination_done(key)  # else ended by ``waits``, in the same section
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
            self.children.create(ch.build_service(w, raw), kind_word="headless Service",
                                 state=state)
        claims = self._claims(w, raw, placements, attempt, mine) \
            if exposure is DeviceExposure.DRA else {}
        if claims is None:
            out.result = Result(requeue_after=0.5)  # an older claim of that name goes first
            return out
        created_now = self._create(state, w, raw, placements, mine, exposure, nodes, claims,
                                   commit=fresh, pending=pending)
        if created_now and key not in self._bound_observed:
            self._bound_observed.add(key)
            created = parse_time(meta.get("creationTimestamp"))
            if created is not None and w.status.retries == 0:
                m.CREATE_TO_BOUND.observe(max(0.0, (self.clock() - created).total_seconds()))

        phases = {i: self.children.phase(c) for i, c in mine.items() if i < w.spec.replicas}
        phase, message = aggregate(phases, w.spec.replicas)
        if phase is Phase.FAILED:
            self._rejected(placements, mine, status)
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

    def _create(self, state: PlacementState, w: GPUWorkload, raw: JSON,
                placements: list[Placement], mine: dict[int, JSON],
                exposure: DeviceExposure, nodes: Mapping[str, NodeInfo],
                claims: Mapping[int, Any], *, commit: bool,
                pending: _Commit | None = None) -> bool:
        """Creates each replica's child that ``mine`` lacks (True: one was created
        now). What was created holds its devices from the end of the creates, all in
        one section, even when a create raised; with ``commit`` (its first bound
        pod is the commit point) or ``pending`` (its status write was) the booking
        is committed in that section."""
        key, kind, held = w.key, child_kind(w), []
        try:
            for p in placements:
                if p.index in mine:
                    continue
                if w.status.phase is Phase.RUNNING:
                    # Not the workload's failure: a user's delete, an eviction, a
                    # removed node. The gang restarts as a whole; no retry is spent.
                    raise EndAttempt("ReplicaDeleted", f"replica {p.index} on {p.node} was "
                                     f"deleted; the gang restarts", spend=False)
                child = ch.build_child(
                    w, raw, p, exposure,
                    lambda node, devices: uuids_of(nodes.get(node), devices), w.status.retries)
                if p.index in claims:
                    assert self.claims is not None
                    child = self.claims.bind(child, claims[p.index])
                existing = self.children.create(child, kind_word=kind, held=held)
                mine[p.index] = child if existing is None else existing
        finally:
            if held:
                state.hold_created(held, commit=key if commit or pending else None)
                if pending is not None:
                    pending.done = True
                elif commit:
                    log.info("placement.committed", workload=key,
                             placements=";".join(f"{p.index}={p.node}:"
                                                 f"{','.join(map(str, p.devices))}"
                                                 for p in placements))
        return bool(held)

    def _rejected(self, placements: list[Placement], mine: Mapping[int, JSON],
                  status: StatusBuilder) -> None:
        """A replica's pod the kubelet rejected at admission (a node changed after
        the placement) ends the attempt with the kubelet's reason, and the node goes
        into ``status.rejections``: the next attempts avoid it for a while
        (internal/scheduling/rejections.py). Nothing when no pod was rejected."""
        now = self.clock()
        for p in placements:
            child = mine.get(p.index)
            if child is None:
                continue
            pods = pods_of_job(self.children.pods, child) if child.get("kind") == "Job" \
                else [child]
            hit = kubelet_rejection(pods)
            if hit is None:
                continue
            reason, message = hit
            status.rejected(p.node, reason, message, keep=lambda r: live(r, now))
            raise EndAttempt(REJECTED_REASON, f"replica {p.index}'s pod was rejected by the "
                             f"kubelet on {p.node}: {reason}: {message}; {p.node} is avoided "
                             f"for {AVOID_SECONDS // 60}m")

    def _wait_for_devices(self, state: PlacementState, key: str, placements: list[Placement],
                          mine: Mapping[int, JSON], out: Outcome,
                          blocked: dict[str, list[str]] | None = None) -> bool:
        """Before a child is made on a device, every other holder of that device is
        gone (docs/architecture.md, invariants 2 and 3: devices, not workloads, are
        waited for): a preemptor's victims' pods and Jobs, whoever owns them now (an
        orphaned victim's pods are their own), and any pod that came to name the
        device after it was booked. True: wait (the condition says for what; a
        release of devices wakes it). Once every child exists nothing is waited for."""
        if all(p.index in mine for p in placements):
            return False
        if blocked == {}:  # booked in this reconcile, nothing on its devices then
            return False
        waits = state.children_wait(key)  # with nothing to wait for, its nomination ends
        victims, blockers, nominated = waits.victims, waits.blocking, waits.nominated
        if not victims and not blockers:
            return False
        reason = "WaitingForPreemption" if nominated else "WaitingForDevices"
        msg = _waiting_for(blockers, preempted=nominated) if blockers else \
            f"waiting for preempted {', '.join(victims)} to stop"
        out.status.phase(Phase.SCHEDULED, msg).condition(SCHEDULED, True, reason, msg)
        if not blockers:
            out.result = Result(requeue_after=1.0)  # an acknowledgement wakes nobody
        return True

    def _unmanaged(self, state: PlacementState, w: GPUWorkload, raw: JSON, out: Outcome,
                   mine: Mapping[int, JSON], changed: str) -> Outcome:
        """A ``dra`` attempt in a manager without DRA: never torn down
        (controllers/gpuworkload/unmanaged.py). No retry is spent, nothing is
        requeued: its children's events, or a restart with DRA, wake it."""
        if not mine:
            self.release(state, w.key)
            ended = unmanaged.back_to_pending(out.status, self.dra_why)
            ended.events[:0] = out.events
            return ended
        report, done = unmanaged.leave_running(raw, out.status, w.spec.replicas, mine,
                                               self.dra_why, changed,
                                               phase_of=self.children.phase)
        if done:
            state.forget(w.key)
        report.events[:0] = out.events
        report.raw = out.raw
        return report

    def _claims(self, w: GPUWorkload, raw: JSON, placements: list[Placement], attempt: int,
                mine: Mapping[int, JSON]) -> dict[int, str] | None:
        """``deviceExposure: dra``: each replica's claim, allocated to its devices
        before its pod exists (controllers/dra/claims.py). None: wait and come back."""
        assert self.claims is not None
        out: dict[int, str] = {}
        for p in placements:
            name = self.claims.ensure(w, raw, p, attempt, p.index in mine)
            if name is None:
                return None
            out[p.index] = name
        return out

    @staticmethod
    def spec_change(w: GPUWorkload, placements: list[Placement],
                    mine: Mapping[int, JSON]) -> str:
        """What changed in the spec since this attempt was placed ('' if nothing):
        the replica count, or the template its children (``mine``: this attempt's,
        by index, ``ChildAPI.by_attempt``) were made from."""
        if len(placements) != w.spec.replicas:
            return f"replicas {len(placements)} -> {w.spec.replicas}"
        want = ch.spec_hash(w)
        for child in mine.values():
            have = ((child.get("metadata") or {}).get("annotations") or {}).get(
                SPEC_HASH_ANNOTATION)
            if have and have != want:
                return "template"
        return ""

    def end_attempt(self, state: PlacementState, w: GPUWorkload, raw: JSON,
                    status: StatusBuilder, reason: str, message: str, *,
                    spend: bool = True) -> Outcome:
        """A replica failed, its node vanished, its child could not be made: ask its
        children to go (their devices stay held until they are gone), release the
        booking, then retry or fail. Without ``spend`` (a spec change, a replica
        deleted by someone else) it is placed again at once and no retry is spent."""
        self.children.delete(raw, only_unfinished=True)
        self.release(state, w.key)
        if not spend:
            status.placements(None).retry(next_retry=None).phase(Phase.PENDING, message)
            status.condition(SCHEDULED, False, reason, message)
            status.condition(READY, False, reason, message)
            return Outcome(status, Result(requeue_after=0.5)).warn(reason, message)
        retries = w.status.retries
        if not should_retry(retries, w.spec.retry_policy):
            return self.fail(state, raw, status, reason, f"{message}; no retries left "
                             f"(maxRetries {w.spec.retry_policy.max_retries})")
        retries += 1
        m.RETRIES.inc()
        delay, nxt = self.next_retry(retries, w.spec.retry_policy, self.clock())
        msg = f"{message}; retry {retries} of {w.spec.retry_policy.max_retries} in {delay:.0f}s"
        status.placements(None).retry(retries, nxt).phase(Phase.PENDING, msg)
        status.condition(SCHEDULED, False, reason, msg).condition(READY, False, reason, msg)
        return Outcome(status, Result(requeue_after=delay)).warn(reason, msg)

    def next_retry(self, retry: int, policy: RetryPolicy, now: datetime) -> tuple[float, str]:
        """When retry ``retry`` (from 1) may start: its delay in seconds (exponential
        backoff with jitter, ``retryPolicy``) and the ``status.nextRetryTime`` that
        says so. The one place a retry's time is made, for an ended attempt and an
        unschedulable one alike."""
        delay = next_delay(retry, policy, self.rng)
        return delay, fmt_time(datetime.fromtimestamp(now.timestamp() + delay, UTC))

    def fail(self, state: PlacementState, raw: JSON, status: StatusBuilder, reason: str,
             message: str, retries: int | None = None) -> Outcome:
        """Failed for good: ``Failed=True`` and ``Scheduled=False`` with the reason
        (``kubectl wait --for=condition=Scheduled=false`` finds it); an unschedulable
        workload's Event is ``FailedScheduling``, as every try before it."""
        state.forget(object_key(raw))
        m.FAILURES.labels(reason).inc()
        log.info("workload.failed", workload=object_key(raw), reason=reason, message=message)
        status.retry(retries, None).phase(Phase.FAILED, message)
        status.condition(FAILED, True, reason, message).condition(READY, False, reason, message)
        status.condition(SCHEDULED, False, reason, message)
        return Outcome(status).warn("FailedScheduling" if reason == UNSCHEDULABLE else reason,
                                    message)


class _Commit:
    """A booking made durable by a status write in this reconcile, to be committed
    in the cache once, in the first section that can take it (``run_or_end``)."""

    __slots__ = ("done", "key")

    def __init__(self, key: str) -> None:
        self.key = key
        self.done = False

    def now(self, state: PlacementState) -> None:
        """Commits it unless done already."""
        if not self.done:
            self.done = True
            state.commit(self.key)


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


def _placed(status: StatusBuilder, placements: list[Placement]) -> None:
    """Nothing is waited for any more: a ``Scheduled`` condition still saying what
    was waited for becomes the placement's (reason ``Scheduled``, as a placement
    that waited for nothing has it, and the same message naming the nodes)."""
    current = get_condition(status.status, SCHEDULED) or {}
    if current.get("reason") in WAITING_REASONS:
        nodes = ", ".join(sorted({p.node for p in placements}))
        status.condition(SCHEDULED, True, "Scheduled",
                         f"placed {len(placements)} replica(s) on {nodes}")
