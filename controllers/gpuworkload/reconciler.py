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
|                                           | (controllers/gpuworkload/unmanaged.py)         |

Commit points. One replica in Pod mode: the bound pod itself (its ``nodeName`` and
env cannot change after creation) — the status write that follows only reports.
Gangs and Job mode: ``status.placements``, written with the object's
resourceVersion before any child, because a half-created gang cannot be rebuilt
from its pods alone. A crash between two steps is repaired by the next reconcile
from what the API holds (our own pods of the current attempt are adopted, never
decided again).

The status is built by one ``StatusBuilder`` through the reconcile and written
once at its end, and not at all when nothing a user sees changed.

The reconcile is split by step: this module observes and reports (and holds the
adopted placements of a crash); ``placing.py`` decides, books and commits a
placement; ``attempt.py`` runs an attempt on it and ends it. The placement state
is fetched once per reconcile (``PlacementStateSource.get``) and passed down (to
the children's creates and the finalizer's release too).
Beside this flow: ``child_api.py`` sends and reads back the children (created
once, adopted when ours, asked to go), ``finalizer.py`` holds our finalizer and
the deletion, ``reconcile_outcome.py`` what a reconcile reports.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog
from pydantic import ValidationError

from api.v1alpha1.keys import (
    ATTEMPT_LABEL,
    CHILDREN_FINALIZER,
    DEVICES_ANNOTATION,
    INDEX_LABEL,
    MIG_ANNOTATION,
    SHARE_ANNOTATION,
)
from api.v1alpha1.types import (
    API_VERSION,
    DeviceExposure,
    GPUWorkload,
    GPUWorkloadSpec,
    Phase,
    Placement,
    SchedulingStrategy,
)
from controllers.dra.availability import NOT_ENABLED
from controllers.gpuworkload import unmanaged
from controllers.gpuworkload.attempt import AttemptRunner
from controllers.gpuworkload.backstop import Backstop
from controllers.gpuworkload.child_api import ChildAPI
from controllers.gpuworkload.finalizer import ChildrenFinalizer
from controllers.gpuworkload.models import WorkloadModels
from controllers.gpuworkload.options import Options
from controllers.gpuworkload.placing import Placer, changed_message, pod_is_commit_point
from controllers.gpuworkload.reconcile_outcome import EndAttempt, Outcome
from controllers.placement.pod_book import PodBook
from controllers.placement.source import PlacementStateSource
from controllers.placement.standing import Standing
from controllers.placement.state import PlacementState
from controllers.shared.own_writes import OwnWrites
from controllers.status.builder import StatusBuilder, same_status
from controllers.status.conditions import PREEMPTED, SCHEDULED, get_condition
from controllers.status.writer import StatusWriter
from internal.objects import JSON, object_key
from internal.scheduling.holdings import Allocation
from internal.scheduling.pods import BadPod, parse_devices
from runtime import Conflict, Request, Result
from runtime.events import EventRecorder
from runtime.store import Indexer

if TYPE_CHECKING:
    from controllers.dra.claims import ClaimManager

log = structlog.get_logger("gpuworkload")

#: condition type set False when status.placements was edited by someone else
PLACEMENT_TRUSTED = "PlacementTrusted"


def _now() -> datetime:
    return datetime.now(UTC)


class GPUWorkloadReconciler:
    def __init__(self, client: Any, recorder: EventRecorder, workloads: Indexer,
                 pods: Indexer, jobs: Indexer, states: PlacementStateSource,
                 options: Options | None = None, clock: Callable[[], datetime] = _now,
                 rng: random.Random | None = None,
                 status_writer: StatusWriter | None = None,
                 backstop: Backstop | None = None, claims: ClaimManager | None = None,
                 dra_why: str = NOT_ENABLED, own_writes: OwnWrites | None = None) -> None:
        self.client = client
        #: our writes the cache has not shown yet (children, status, commits), shared
        #: with the status writer and the placement state
        self.own_writes = own_writes if own_writes is not None else \
            status_writer.own_writes if status_writer is not None else OwnWrites()
        #: the manager's one placement state, shared with the other placing
        #: controllers (the pod binding, the claims)
        self.states = states
        #: reconciles unsettled workloads nobody looked at for a while, and counts
        #: those that were owed (a lost requeue); None: no backstop
        self.backstop = backstop
        #: writes every status but a gang's commit, off the workers' client (None:
        #: written synchronously by the worker, on ``client``)
        self.status_writer = status_writer
        #: the children in the API: listed, created, asked to go
        self.children = ChildAPI(client, pods, jobs, self.own_writes)
        self.recorder = recorder
        self.workloads = workloads
        self.pods = pods
        self.options = options or Options()
        #: the typed workload of a cached version, its spec validated once per
        #: generation (the hot path)
        self.models = WorkloadModels(self._defaults)
        self.clock = clock
        rng = rng or random.Random()
        #: ``deviceExposure: dra``: the ResourceClaims of replicas
        #: (controllers/dra/claims.py); None while DRA is off
        self.claims = claims
        #: why DRA is off (a sentence), while ``claims`` is None
        self.dra_why = dra_why
        #: running an attempt on a placement, and ending it
        self.attempts = AttemptRunner(self.children, claims, self.options, dra_why, clock, rng)
        #: deciding, booking and committing a placement
        self.placer = Placer(self.children, self.attempts, status_writer, self._write_status,
                             self.own_writes, clock, cached=self._cached)
        self.finalizer = ChildrenFinalizer(client, self.children, status_writer,
                                           self.attempts.release, self.own_writes,
                                           children_gone=self._children_gone)

    # ------------------------------------------------------------------ entry

    @property
    def state(self) -> PlacementState | None:
        """The current placement state (None before the first ``ensure_state()``);
        never builds one."""
        return self.states.current

    @property
    def pod_books(self) -> list[PodBook]:
        """The other controllers booking pods in the same ledger (registered before
        the state is built: ``PlacementStateSource.add_pod_book``)."""
        return self.states.pod_books

    def ensure_state(self) -> PlacementState:
        """The ledger is rebuilt from the cache before the first placement."""
        return self.states.get()

    def reconcile(self, req: Request) -> Result | None:
        state = self.ensure_state()  # the one state of this reconcile
        key = f"{req.namespace}/{req.name}"
        raw = self.workloads.get_by_name(req.name, req.namespace)
        if raw is None:
            self.attempts.release(state, key, departed=True)
            self.models.forget(key)
            if self.status_writer is not None:
                self.status_writer.forget(key)
            if self.backstop is not None:
                self.backstop.forget(key)
            return None
        standing = state.standing_of(key, raw["metadata"].get("uid"))
        if raw["metadata"].get("deletionTimestamp"):
            return self.finalizer.finalize(state, raw)
        view = self.own_writes.view(raw)
        if view is not None:
            raw = view  # the status we last asked for, not yet in the cache
        elif self.own_writes.is_behind(raw):
            # The cache has not caught up with our own last write of this object.
            log.debug("reconcile.behind_own_write", workload=key)
            return Result(requeue_after=0.1)
        out = self._observe_and_act(state, raw, standing)
        return self._report(raw, out)

    def _cached(self, key: str) -> JSON | None:
        """Workload ``key`` as the cache holds it (None: not there)."""
        namespace, _, name = key.partition("/")
        return self.workloads.get_by_name(name, namespace)

    def _defaults(self, spec: GPUWorkloadSpec) -> None:
        """The manager's defaults, on a spec that names none (once per spec model:
        ``WorkloadModels``)."""
        if spec.scheduling_strategy is None:  # the manager's --default-strategy
            spec.scheduling_strategy = SchedulingStrategy(
                self.options.default_strategy or SchedulingStrategy.LEAST_LOADED.value)
        if spec.device_exposure is None:
            spec.device_exposure = self.options.default_exposure  # the filters read it

    def _observe_and_act(self, state: PlacementState, raw: JSON, standing: Standing) -> Outcome:
        key = object_key(raw)
        if standing.departing:  # a victim's devices go once it has no children
            self.placer.children_gone(state, raw, departing=True)
        status = StatusBuilder(raw, self.clock())
        try:
            w = self.models.model(raw, (self.options.default_strategy,
                                        self.options.default_exposure))
        except ValidationError as exc:
            errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return _invalid_spec(raw, status, f"invalid spec: {errs}")
        assert w.spec.scheduling_strategy is not None  # prepared: _defaults
        status.strategy(w.spec.scheduling_strategy.value)
        if self.claims is not None or w.spec.device_exposure is not DeviceExposure.DRA:
            unmanaged.managed_again(raw, status)
        if w.status.phase in (Phase.SUCCEEDED, Phase.FAILED):
            state.forget(key)
            return Outcome(status)
        if standing.eviction_message is not None:
            return self.placer.evicted(state, raw, status, standing.eviction_message)
        booking = standing.booking
        try:
            placements = self._placements(state, w, raw, booking)
        except EndAttempt as end:
            return self.attempts.end_attempt(state, w, raw, status, end.reason, end.message,
                                             spend=end.spend)
        check = self.options.check_children
        if placements is None and check is not None and (why := check(w, raw)) is not None:
            return _invalid_spec(raw, status, f"invalid spec: {why}")
        if placements is None:
            waiting = self.placer.previous_attempt(state, w, raw, status)
            return waiting if waiting is not None else self.placer.place(state, w, raw, status)
        if booking is not None and _shape(booking.placements) != _shape(placements):
            # status.placements says something this controller did not book (edited
            # by hand, or forged): never acted on; what was booked wins.
            msg = (f"status.placements does not match what the controller booked "
                   f"({_describe(booking.placements)}); the edit is ignored")
            out = Outcome(status.condition(PLACEMENT_TRUSTED, False, "PlacementNotBooked", msg))
            out.warn("PlacementNotBooked", msg)
            return self.attempts.run_or_end(state, w, raw, status, list(booking.placements),
                                            out)
        if booking is None and not state.adopt(raw):
            # A committed placement this ledger did not hold (a write whose answer
            # was lost, a previous leader, a forged one) that collides with what runs
            # now: what runs wins. Never the workload's failure (``CONFLICT``): no
            # retry is spent.
            return self.attempts.end_attempt(state, w, raw, status, "PlacementConflict",
                                             CONFLICT, spend=False)
        return self.attempts.run_or_end(state, w, raw, status, placements)

    def _placements(self, state: PlacementState, w: GPUWorkload, raw: JSON,
                    booking: Allocation | None) -> list[Placement] | None:
        """This attempt's placement: committed in status; else our committed booking
        (the pod was created, the cache has not caught up); else read back from our
        own pods of this attempt (a one-replica pod is its own commit point). A pod
        read back onto devices other owners hold raises ``EndAttempt`` (what runs
        wins, as for a committed status that collides)."""
        if w.status.placements:
            return list(w.status.placements)
        if booking is not None and booking.committed and booking.placements:
            return list(booking.placements)
        adopted = self._placements_from_pods(w, raw)
        if adopted:
            if not state.adopt({**raw, "status": {**(raw.get("status") or {}),
                                                  "placements": [p.model_dump(by_alias=True)
                                                                 for p in adopted]}}):
                raise EndAttempt("PlacementConflict", CONFLICT, spend=False)
            return adopted
        return None

    def _placements_from_pods(self, w: GPUWorkload, raw: JSON) -> list[Placement]:
        if not pod_is_commit_point(w):
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

    def _children_gone(self, state: PlacementState, raw: JSON) -> None:
        """Being deleted, none of its children left: what it held on to after a
        preemption goes (``Placer.children_gone``), and a dra workload's claims."""
        self.placer.children_gone(state, raw)
        self._claims_left(raw)

    def _claims_left(self, raw: JSON) -> None:
        """A dra workload deleted while this manager runs without DRA releases its
        claims once its pods are gone (controllers/gpuworkload/unmanaged.py)."""
        if self.claims is None and self.dra_why == NOT_ENABLED:
            unmanaged.release_claims_of_deleted(self.client, self.recorder, raw,
                                                self.options.default_exposure)

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
            # a status written again after the API refused it for good was owed to
            # that refusal (reported by the writer), not to a lost requeue
            owed = self.status_writer is not None and self.status_writer.refused(raw)
            self.backstop.reconciled(object_key(raw), acted and not owed)
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
        self.own_writes.wrote(written)
        return written


def _shape(placements: Any) -> list[tuple[int, str, tuple[int, ...]]]:
    return sorted((p.index, p.node, tuple(sorted(p.devices))) for p in placements)


def _describe(placements: Any) -> str:
    return "; ".join(f"{i}={n}:{','.join(map(str, d))}" for i, n, d in _shape(placements))


#: a committed placement (a status, or a one-replica pod read back) that the ledger
#: did not book and cannot: a write of a previous leader that died with it or landed
#: after the new one's rebuild (a victim's Preempted, an ended attempt's cleared
#: placements, a create in flight during an etcd pause), never the workload's
#: failure, so it is placed again and spends no retry
CONFLICT = ("its devices are held by another workload's pods; placed again, "
            "no retry spent")


def _invalid_spec(raw: JSON, status: StatusBuilder, message: str) -> Outcome:
    """A spec that can never be placed: said once (condition and Event), no retry
    spent. Its pods, if any, keep holding their devices: the ledger follows them."""
    status.phase(Phase.PENDING, message).condition(SCHEDULED, False, "InvalidSpec", message)
    out = Outcome(status)
    return out.warn("InvalidSpec", message) if changed_message(raw, message) else out
