"""Wires the GPUWorkload controller into a manager: informers, indexes, the
placement state's event handlers, the controller, its status writer, and the state
metrics.

Clients, as kube-scheduler has them: the workers' (the manager's) sends what commits
a placement (the bound pod, a gang's status); a second one, with its own token
bucket of the same size, carries the asynchronous status writes and our finalizer;
Events go through the manager's Events client, or a third one when the manager has
no Events client of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from api.v1alpha1.types import API_VERSION, DeviceExposure
from controllers.dra.availability import (
    NOT_ENABLED,
    DraUnavailableGate,
    dra_unavailable,
    status_submitter,
)
from controllers.dra.claim_controller import claim_manager, setup_claims
from controllers.dra.claims import DraOptions
from controllers.gpuworkload.backstop import DEFAULT_PERIOD, Backstop
from controllers.gpuworkload.intruders import (
    SWEEP_PERIOD,
    IntruderEvictor,
    booked_child,
    over_commits,
)
from controllers.gpuworkload.job_pods import workload_of_job_pod
from controllers.gpuworkload.options import Options
from controllers.gpuworkload.reconciler import GPUWorkloadReconciler
from controllers.gpuworkload.template_check import ChildDryRun
from controllers.placement.pod_book import PodBook
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState
from controllers.queues.status import setup_queues
from controllers.shared.own_writes import OwnWrites
from controllers.status.conditions import MANAGED, get_condition
from controllers.status.pacing import Pacer, PacingOptions
from controllers.status.writer import StatusWriter
from internal.metrics.domain import STATE, DeviceUse
from internal.objects import object_key
from internal.scheduling.bounds import MAX_GPUS_PER_NODE
from internal.scheduling.inventory import heartbeat
from internal.scheduling.resourceslices import DRA_API_VERSION
from internal.scheduling.sharefloor import DEFAULT_FLOORS, ShareFloors
from runtime import Builder, Client, Controller, FuncHandler, Manager, Request
from runtime.events import EventRecorder
from runtime.store import (
    NODE_NAME_INDEX,
    OWNER_UID_INDEX,
    index_by_node_name,
    index_by_owner_uid,
)
from runtime.ticker import Ticker

log = structlog.get_logger("setup")

PLACEMENT_NODE_INDEX = "placement-node"
COMPONENT = "gpu-orchestrator"
#: placements count as being made until the work queue has been idle this long (s):
#: in a burst it empties for a moment between two workloads' events, and the status
#: writer's held statuses should not all go at each such moment
PLACING_QUIET = 1.0


def index_by_placement_node(obj: Any) -> list[str]:
    return sorted({p.get("node") for p in (obj.get("status") or {}).get("placements") or ()
                   if p.get("node")})


@dataclass
class ControllerOptions:
    workers: int = 16  # kube-scheduler's parallelism: a worker waits on its pod create
    default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES
    stale_after: float = 90.0  # seconds without a GPUNode heartbeat before it is stale
    stale_check_period: float = 10.0
    #: GPUs a node may report before it is refused (internal/scheduling/bounds.py)
    max_gpus_per_node: int = MAX_GPUS_PER_NODE
    default_strategy: str | None = None  # for specs that name no schedulingStrategy
    #: place only GPUWorkloads of these namespaces (empty: all); every pod and every
    #: workload's placements are still read and counted, wherever they are
    namespaces: frozenset[str] = frozenset()
    #: Dynamic Resource Allocation (``deviceExposure: dra``, ResourceSlice inventory,
    #: claims as holders); None: off (the API may not serve resource.k8s.io/v1)
    dra: DraOptions | None = None
    #: seconds after which an unsettled workload nobody reconciled is reconciled
    #: again (controllers/gpuworkload/backstop.py); 0: no backstop
    resync_unsettled: float = DEFAULT_PERIOD
    #: evict pods that name devices no controller or webhook of ours gave them
    #: (controllers/gpuworkload/intruders.py); the manager's --evict-conflicting-pods, on by default
    evict_conflicting_pods: bool = False
    #: before placing a spec, create its highest-index child with dryRun=All and report
    #: a template the API server refuses as InvalidSpec (controllers/gpuworkload/template_check.py)
    dry_run_children: bool = True
    async_status: bool = True  # status written by the StatusWriter, off the workers' client
    status_writers: int = 4  # writer threads (each waits on one write at a time)
    require_queue: bool = False  # a workload in no GPUQueue waits (NoQueue) instead of placed
    #: the smallest share placed and the least a share counts against its queue
    share_floors: ShareFloors = DEFAULT_FLOORS
    #: when the status writer sends (controllers/status/pacing.py): the lag a
    #: Scheduled status waits for a newer one, the rate while placing
    status_pacing: PacingOptions = field(default_factory=PacingOptions)


def only_in(namespaces: frozenset[str], reconciler: Any) -> Any:
    """``reconciler``, or a reconcile function that ignores requests outside
    ``namespaces`` (the manager's --namespaces; RBAC from config/namespaced matches)."""
    if not namespaces:
        return reconciler

    def reconcile(req: Request) -> Any:
        return reconciler.reconcile(req) if req.namespace in namespaces else None
    return reconcile


def second_client(mgr: Manager) -> Client:
    """A client to the same server with a token bucket of its own (the same QPS and
    burst as the manager's), as kube-scheduler's event client; its writes are fenced
    by the leader election like the workers' (a leader that lost its Lease writes no
    status either)."""
    return mgr.client.derive(write_guard=mgr.client.write_guard)


def placement_handler(reconciler: GPUWorkloadReconciler, kind: str, method: str
                      ) -> FuncHandler:
    """The placement state's handler of one kind: adds and updates go to the
    state's ``events.<method>`` (its ``CacheEvents``), deletes to
    ``<method>_deleted``. A call that raises loses that event, so the state may be
    short of a holder: it is invalidated and filled again from the caches before
    the next placement (``ensure_state()``). Inline: the state's updates are memory
    only, so they run on the watch's thread (runtime/informer.py), through the
    state's event gate, which defers an event rather than wait for a decide
    (controllers/placement/event_gate.py)."""
    def lost(op: str, obj: Any, exc: BaseException) -> None:
        state = reconciler.state
        if state is not None:
            state.invalidate(f"the {kind} {op} handler raised {type(exc).__name__}: {exc}")

    def call(name: str, op: str) -> Any:
        def deliver(*args: Any) -> None:
            state = reconciler.state
            if state is not None:
                handler, obj = getattr(state.events, name), args[-1]
                state.apply_event(lambda: handler(obj), lambda exc: lost(op, obj, exc))
        return deliver

    return FuncHandler(call(method, "add"), call(method, "update"),
                       call(f"{method}_deleted", "delete"),
                       name=f"placement-{kind.lower()}", on_error=lost, inline=True)


def _refresh_stale(reconciler: GPUWorkloadReconciler) -> None:
    """Re-judges GPUNode heartbeats (time passes without events)."""
    if reconciler.state is not None:
        reconciler.state.refresh_stale()


def setup_gpuworkload_controller(mgr: Manager, opts: ControllerOptions
                                  ) -> tuple[Controller, GPUWorkloadReconciler]:
    """Returns the controller and its reconciler, whose ``ensure_state()`` gives the
    shared placement state (other placing controllers must use the same ledger)."""
    owner_index = {OWNER_UID_INDEX: index_by_owner_uid}
    workloads = mgr.informer_for(API_VERSION, "GPUWorkload",
                                 indexers={PLACEMENT_NODE_INDEX: index_by_placement_node})
    pods = mgr.informer_for("v1", "Pod",
                            indexers={**owner_index, NODE_NAME_INDEX: index_by_node_name})
    jobs = mgr.informer_for("batch/v1", "Job", indexers=owner_index)
    nodes = mgr.informer_for("v1", "Node")
    gpunodes = mgr.informer_for(API_VERSION, "GPUNode")
    # whether a workload's priority is an admin's (it may then preempt elsewhere)
    classes = mgr.informer_for("scheduling.k8s.io/v1", "PriorityClass")

    def class_value(name: str) -> int | None:
        pc = classes.indexer.get_by_name(name)
        value = pc.get("value") if pc is not None else None
        return value if isinstance(value, int) else None
    dra = opts.dra
    dra_why = NOT_ENABLED if dra is None else dra_unavailable(mgr.client)
    if dra is not None and dra_why is not None:
        # informers of an API that is not served would never sync (the manager would
        # stop at its cache-sync timeout): DRA goes off, said once, here
        log.warning("dra.unavailable", reason=dra_why,
                    effect="deviceExposure dra is refused (DRAUnavailable); ResourceSlices "
                           "and ResourceClaims are not read")
        dra = None
    slices = mgr.informer_for(DRA_API_VERSION, "ResourceSlice") if dra else None
    claims = mgr.informer_for(DRA_API_VERSION, "ResourceClaim") if dra else None

    holder: dict[str, Controller] = {}
    #: our writes the caches have not shown yet: children, status writes, commits,
    #: seed bindings (one record per UID, shared by everyone that writes or reads)
    own_writes = OwnWrites()
    # the queues' gate in decide (None where GPUQueues are not served)
    queue_book = setup_queues(mgr, workloads, lambda: states.if_ready(), opts.require_queue,
                              opts.share_floors)

    def enqueue(keys: Iterable[str]) -> None:
        ctrl = holder.get("ctrl")
        if ctrl is None:
            return
        for k in keys:
            ns, name = k.split("/", 1)
            ctrl.enqueue(Request(ns, name))

    def enqueue_on_node(node: str) -> None:
        enqueue(object_key(w) for w in workloads.indexer.by_index(PLACEMENT_NODE_INDEX, node))

    def new_state(pod_books: tuple[PodBook, ...]) -> PlacementState:
        return PlacementState(opts.default_exposure, enqueue_waiting=enqueue,
                              enqueue_on_node=enqueue_on_node, stale_after=opts.stale_after,
                              pod_books=pod_books, on_problem=recorder.warning,
                              dra_driver=dra.driver if dra else None,
                              priority_class_value=class_value, own_writes=own_writes,
                              queues=queue_book, max_gpus_per_node=opts.max_gpus_per_node,
                              share_floors=opts.share_floors)

    def fill(state: PlacementState) -> None:
        state.rebuild(lambda: (nodes.indexer.list(), gpunodes.indexer.list(),
                               workloads.indexer.list(), pods.indexer.list()),
                      (lambda: (slices.indexer.list(), claims.indexer.list()))
                      if slices is not None and claims is not None else None,
                      read_jobs=jobs.indexer.list)

    states = PlacementStateSource(new_state, fill)

    status_client = second_client(mgr) if opts.async_status else None
    if getattr(mgr, "events_client", None) is not None or status_client is None:
        recorder = mgr.event_recorder(COMPONENT)
    else:
        # this manager sends Events on the workers' client: ours get a client of
        # their own, as kube-scheduler's
        recorder = EventRecorder(second_client(mgr), COMPONENT)
    writer = None
    if status_client is not None:
        def placing() -> bool:  # the workers had something queued or in hand just now
            ctrl = holder.get("ctrl")
            return ctrl is not None and ctrl.queue.idle_for() < PLACING_QUIET

        writer = StatusWriter(status_client, workloads.indexer, threads=opts.status_writers,
                              own_writes=own_writes, recorder=recorder,
                              pacer=Pacer(opts.status_pacing, busy=placing))
        mgr.add(writer)
    backstop = Backstop(workloads.indexer.list, lambda key: enqueue([key]),
                        opts.resync_unsettled) if opts.resync_unsettled > 0 else None
    claim_mgr = claim_manager(mgr, states, recorder, dra) if dra is not None else None
    reconciler = GPUWorkloadReconciler(
        mgr.client, recorder, workloads.indexer, pods.indexer,
        jobs.indexer, states,
        options=Options(default_exposure=opts.default_exposure,
                        default_strategy=opts.default_strategy,
                        check_children=ChildDryRun(mgr.client, opts.default_exposure).check
                        if opts.dry_run_children else None),
        status_writer=writer, backstop=backstop, claims=claim_mgr, own_writes=own_writes,
        dra_why=dra_why or NOT_ENABLED)
    if backstop is not None:
        mgr.add(Ticker("backstop", backstop.period / 2, backstop.sweep))

    def on(kind: str, method: str) -> FuncHandler:
        return placement_handler(reconciler, kind, method)

    nodes.add_event_handler(on("Node", "on_node"))
    gpunodes.add_event_handler(on("GPUNode", "on_gpunode"))
    pods.add_event_handler(on("Pod", "on_pod"))
    jobs.add_event_handler(on("Job", "on_job"))
    if opts.evict_conflicting_pods:
        evictor = IntruderEvictor(mgr.client, recorder,
                                  lambda p: any(b.owns(p) for b in states.pod_books),
                                  lambda: states.if_ready() is not None, opts.namespaces,
                                  booked_child=lambda p: booked_child(states.if_ready(), p),
                                  over_commits=lambda p: over_commits(states.if_ready(), p))
        pods.add_event_handler(FuncHandler(evictor.on_pod, evictor.on_pod,
                                           evictor.on_pod_deleted))

        def sweep_intruders() -> None:
            states.get()  # the ledger, built from the caches if no reconcile has yet
            evictor.sweep(pods.indexer.list())
        mgr.add(Ticker("intruders", SWEEP_PERIOD, sweep_intruders))
    for informer in (workloads, pods, jobs):  # the cache shows our writes
        informer.add_event_handler(FuncHandler(
            own_writes.observed, lambda old, new: own_writes.observed(new),
            own_writes.deleted, name=f"own-writes-{informer.kind.lower()}", inline=True))
    workloads.add_event_handler(on("GPUWorkload", "on_workload"))
    if slices is not None and claims is not None:
        slices.add_event_handler(on("ResourceSlice", "on_resourceslice"))
        claims.add_event_handler(on("ResourceClaim", "on_claim"))

    builder = (Builder(mgr).named("gpuworkload")
               .for_(API_VERSION, "GPUWorkload")
               .owns("v1", "Pod")
               .owns("batch/v1", "Job")
               # a Job child's pod: its workload's phase is read from it
               .watches("v1", "Pod", workload_of_job_pod(jobs.indexer, API_VERSION,
                                                         "GPUWorkload")))
    if dra is not None:
        builder = builder.owns(DRA_API_VERSION, "ResourceClaim")  # an edited claim is seen
    gated: Any = reconciler
    if dra is None:
        gated = DraUnavailableGate(
            reconciler.reconcile, workloads.indexer, opts.default_exposure,
            dra_why or NOT_ENABLED, recorder,
            writer.submit if writer is not None else status_submitter(mgr.client),
            own_writes.view,
            has_children=lambda raw: any(
                informer.indexer.by_index(OWNER_UID_INDEX, raw["metadata"].get("uid"))
                for informer in (pods, jobs)))
    ctrl = builder.with_options(max_concurrent_reconciles=opts.workers).complete(
        only_in(opts.namespaces, gated))
    holder["ctrl"] = ctrl
    if claim_mgr is not None:
        setup_claims(mgr, states, claim_mgr)
    mgr.add(Ticker("gpunode-staleness", opts.stale_check_period,
                   lambda: _refresh_stale(reconciler)))

    def phases() -> dict[str, int]:
        counts: dict[str, int] = {}
        for w in workloads.indexer.list():
            phase = (w.get("status") or {}).get("phase") or "Pending"
            counts[phase] = counts.get(phase, 0) + 1
        return counts

    def node_gpus() -> tuple[dict[str, int], dict[str, int]]:
        state = states.if_ready()
        return state.node_gpus() if state is not None else ({}, {})

    def unmanaged() -> dict[str, int]:
        counts: dict[str, int] = {}
        for w in workloads.indexer.list():
            cond = get_condition(w.get("status") or {}, MANAGED) or {}
            if cond.get("status") == "False":
                reason = str(cond.get("reason") or "")
                counts[reason] = counts.get(reason, 0) + 1
        return counts

    def heartbeats() -> dict[str, float]:
        now = datetime.now(UTC)
        out = {}
        for g in gpunodes.indexer.list():
            beat = heartbeat(g)
            if beat is not None:
                out[g["metadata"]["name"]] = max(0.0, (now - beat).total_seconds())
        return out

    def shares() -> list[tuple[str, int, float, int | None]]:
        state = states.if_ready()
        return state.device_shares() if state is not None else []

    def devices() -> list[tuple[str, int, DeviceUse]]:
        state = states.if_ready()
        return state.device_use() if state is not None else []

    STATE.set_sources(phases, node_gpus, heartbeats, unmanaged, shares, devices)
    return ctrl, reconciler
