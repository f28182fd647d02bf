"""The composition root: every part the controllers share is made here once, in
the order its dependencies allow, and handed to each controller when that is made.
``main.py`` calls ``setup_controllers`` and reads nothing of what it returns; each
controller's own setup (``gpuworkload/setup.py``, ``podbinding/controller.py``,
``dra/claim_controller.py``, ``queues/status.py``) takes the parts it uses.

The shared parts, in the order they are made:

1. ``Informers`` (controllers/informers.py): one informer per kind, every index
   any controller reads declared there.
2. ``OwnWrites``: our writes the caches have not shown yet (children, status
   writes, commits, seed Bindings), one record per UID.
3. The Event recorder.
4. ``WorkloadQueue``: the GPUWorkload controller's work queue, for the parts made
   before the controller (a cycle, below).
5. The ``PlacementStateSource``: the one placement state (cache and scheduler),
   made and filled from the caches by ``StateFactory`` at its first use.
6. The queues (``setup_queues``: the ``QueueBook``, its status and namespace-marks
   controllers, the gauges); None where GPUQueues are not served.
7. The ``StatusWriter`` on a second client, and the ``ClaimManager`` (DRA on).
8. The feeds: the placement state's and own writes' informer handlers, the GPUNode
   staleness ticker, the state gauges.

Two cycles are real, and each is closed by a ``Later`` (controllers/later.py), set
before the manager starts:

- the placement state, the status writer's pacer and the backstop enqueue on (or
  read) the GPUWorkload controller's queue, and the controller is made from the
  reconciler that is made with them (``WorkloadQueue.controller``);
- the placement state's decide asks the queue book (the gate), and the book wakes
  the state's waiting workloads when a quota changes (``StateFactory.queues``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import structlog

from controllers.dra.availability import NOT_ENABLED, dra_unavailable, templates_readable
from controllers.dra.claim_controller import ClaimReconciler, setup_claims
from controllers.dra.claims import ClaimManager, DraOptions
from controllers.gpuworkload.intruders import IntruderEvictor
from controllers.gpuworkload.reconciler import GPUWorkloadReconciler
from controllers.gpuworkload.setup import setup_evictor, setup_gpuworkload_controller
from controllers.informers import (
    PLACEMENT_NODE_INDEX,
    Informers,
    feed_own_writes,
    feed_placement,
    make_informers,
)
from controllers.later import Later
from controllers.options import ControllerOptions
from controllers.placement.pod_book import PodBook
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState
from controllers.podbinding.controller import PodBindingOptions, PodBindingReconciler
from controllers.podbinding.group_metrics import GroupCounts
from controllers.podbinding.memberclaims import MemberClaimsReader
from controllers.podbinding.owners import owner_lookup
from controllers.podbinding.setup import setup_podbinding_controller
from controllers.queues.book import QueueBook
from controllers.queues.status import setup_queues
from controllers.shared.own_writes import OwnWrites
from controllers.state_metrics import StateMetrics
from controllers.status.pacing import Pacer
from controllers.status.writer import StatusWriter
from internal.metrics.domain import POD_GROUPS
from internal.objects import object_key
from runtime import Client, Controller, Manager, Request
from runtime.events import EventRecorder
from runtime.ticker import Ticker

__all__ = ["ControllerOptions", "Controllers", "Shared", "make_shared", "setup_controllers"]

log = structlog.get_logger("setup")

COMPONENT = "gpu-orchestrator"
#: placements count as being made until the work queue has been idle this long (s):
#: in a burst it empties for a moment between two workloads' events, and the status
#: writer's held statuses should not all go at each such moment
PLACING_QUIET = 1.0


class WorkloadQueue:
    """The GPUWorkload controller's work queue, for the parts made before the
    controller: nothing is enqueued before it is set (no informer runs before the
    manager starts, after the root set it)."""

    def __init__(self, informers: Informers) -> None:
        # cycle: the controller is made from its reconciler, which is made with the
        # placement state, the status writer and the backstop, which enqueue on it
        self.controller: Later[Controller] = Later("the GPUWorkload controller")
        self._informers = informers

    def add_keys(self, keys: Iterable[str]) -> None:
        ctrl = self.controller.peek()
        if ctrl is None:
            return
        for k in keys:
            ns, name = k.split("/", 1)
            ctrl.enqueue(Request(ns, name))

    def add_key(self, key: str) -> None:
        self.add_keys((key,))

    def add_on_node(self, node: str) -> None:
        """Every workload placed on ``node``."""
        self.add_keys(object_key(w) for w in self._informers.workloads.indexer.by_index(
            PLACEMENT_NODE_INDEX, node))

    def placing(self) -> bool:
        """The workers had something queued or in hand just now."""
        ctrl = self.controller.peek()
        return ctrl is not None and ctrl.queue.idle_for() < PLACING_QUIET


class StateFactory:
    """Makes the placement state (the source's ``build``) and fills it from the
    caches (its ``fill``), first and after an invalidation."""

    def __init__(self, opts: ControllerOptions, informers: Informers, own_writes: OwnWrites,
                 recorder: EventRecorder, queue: WorkloadQueue, dra: DraOptions | None) -> None:
        self.opts, self.informers, self.own_writes = opts, informers, own_writes
        self.recorder, self.queue, self.dra = recorder, queue, dra
        # cycle: the state's decide asks the queue book (the gate), and the book wakes
        # the state's waiting workloads when a quota changes (setup_queues reads the
        # source); set once the book is made, before the first state is
        self.queues: Later[QueueBook | None] = Later("the queue book")

    def build(self, pod_books: tuple[PodBook, ...]) -> PlacementState:
        opts = self.opts
        return PlacementState(
            opts.default_exposure, enqueue_waiting=self.queue.add_keys,
            enqueue_on_node=self.queue.add_on_node, stale_after=opts.stale_after,
            pod_books=pod_books, on_problem=self.recorder.warning,
            dra_driver=self.dra.driver if self.dra else None,
            priority_class_value=self.informers.class_value, own_writes=self.own_writes,
            queues=self.queues.get(), max_gpus_per_node=opts.max_gpus_per_node,
            share_floors=opts.share_floors)

    def fill(self, state: PlacementState) -> None:
        inf = self.informers
        dra = self._dra_sources if inf.resourceclaims is not None else None
        state.rebuild(self._sources, dra, read_jobs=inf.jobs.indexer.list)

    def _sources(self) -> tuple[list, list, list, list]:
        inf = self.informers
        return (inf.nodes.indexer.list(), inf.gpunodes.indexer.list(),
                inf.workloads.indexer.list(), inf.pods.indexer.list())

    def _dra_sources(self) -> tuple[list, list]:
        inf = self.informers
        assert inf.resourceslices is not None and inf.resourceclaims is not None
        return inf.resourceslices.indexer.list(), inf.resourceclaims.indexer.list()


@dataclass(frozen=True)
class Shared:
    """What the controllers share, each made once (module docstring)."""

    opts: ControllerOptions
    informers: Informers
    own_writes: OwnWrites
    recorder: EventRecorder
    status_writer: StatusWriter | None  # None: statuses written by the workers
    workload_queue: WorkloadQueue
    states: PlacementStateSource
    queues: QueueBook | None  # None: GPUQueues not served
    claims: ClaimManager | None  # None: DRA off or not served
    dra: DraOptions | None  # None: off, or the API does not serve it
    dra_why: str  # why DRA is off (NOT_ENABLED when it was not asked for)


@dataclass(frozen=True)
class Controllers:
    """What ``setup_controllers`` made (tests read it; ``main.py`` does not)."""

    shared: Shared
    gpuworkload: Controller
    reconciler: GPUWorkloadReconciler
    claims: ClaimReconciler | None = None
    binder: PodBindingReconciler | None = None
    evictor: IntruderEvictor | None = None


def second_client(mgr: Manager) -> Client:
    """A client to the same server with a token bucket of its own (the same QPS and
    burst as the manager's), as kube-scheduler's event client; its writes are fenced
    by the leader election like the workers' (a leader that lost its Lease writes no
    status either)."""
    return mgr.client.derive(write_guard=mgr.client.write_guard)


def _dra(mgr: Manager, opts: ControllerOptions) -> tuple[DraOptions | None, str]:
    """DRA's options and why it is off (NOT_ENABLED: not asked for)."""
    if opts.dra is None:
        return None, NOT_ENABLED
    why = dra_unavailable(mgr.client)
    if why is None:
        return opts.dra, NOT_ENABLED
    # informers of an API that is not served would never sync (the manager would
    # stop at its cache-sync timeout): DRA goes off, said once, here
    log.warning("dra.unavailable", reason=why,
                effect="deviceExposure dra is refused (DRAUnavailable); ResourceSlices "
                       "and ResourceClaims are not read")
    return None, why


def _recorder(mgr: Manager, status_client: Client | None) -> EventRecorder:
    if getattr(mgr, "events_client", None) is not None or status_client is None:
        return mgr.event_recorder(COMPONENT)
    # this manager sends Events on the workers' client: ours get a client of their
    # own, as kube-scheduler's
    return EventRecorder(second_client(mgr), COMPONENT)


def make_shared(mgr: Manager, opts: ControllerOptions) -> Shared:
    """The shared parts, in the order of the module docstring."""
    dra, dra_why = _dra(mgr, opts)
    informers = make_informers(mgr, dra is not None,
                               templates=dra is None or templates_readable(mgr.client))
    own_writes = OwnWrites()
    status_client = second_client(mgr) if opts.async_status else None
    recorder = _recorder(mgr, status_client)
    queue = WorkloadQueue(informers)
    factory = StateFactory(opts, informers, own_writes, recorder, queue, dra)
    states = PlacementStateSource(factory.build, factory.fill)
    # the queues, wired in one function (its book, its controllers, its handlers)
    queues = factory.queues.set(setup_queues(mgr, informers.workloads, states.if_ready,
                                             opts.require_queue, opts.share_floors))
    writer = None
    if status_client is not None:
        writer = StatusWriter(status_client, informers.workloads.indexer,
                              threads=opts.status_writers, own_writes=own_writes,
                              recorder=recorder, pacer=Pacer(opts.status_pacing,
                                                             busy=queue.placing))
        mgr.add(writer)
    claims = None
    if dra is not None and informers.resourceclaims is not None:
        claims = ClaimManager(mgr.client, recorder, informers.resourceclaims.indexer, states,
                              dra)
    feed_placement(informers, states, ("Node", "GPUNode", "Pod", "Job"))
    feed_own_writes(informers, own_writes)  # before the workloads' placement handler
    feed_placement(informers, states, ("GPUWorkload", "ResourceSlice", "ResourceClaim"))
    mgr.add(Ticker("gpunode-staleness", opts.stale_check_period, _StaleCheck(states).run))
    StateMetrics(informers, states).register()
    return Shared(opts, informers, own_writes, recorder, writer, queue, states, queues,
                  claims, dra, dra_why)


class _StaleCheck:
    """Re-judges GPUNode heartbeats (time passes without events); builds no state."""

    def __init__(self, states: PlacementStateSource) -> None:
        self.states = states

    def run(self) -> None:
        state = self.states.current  # fed while it is filled, as the handlers
        if state is not None:
            state.refresh_stale()


def setup_controllers(mgr: Manager, opts: ControllerOptions,
                      pod_binding: PodBindingOptions | None = None) -> Controllers:
    """Every controller of the manager on one set of shared parts: the GPUWorkload
    controller, the claims (DRA on), the pod binding of the seed path (with
    ``pod_binding``) and the intruder evictor (``opts.evict_conflicting_pods``); the
    queues' controllers are made with the shared parts (``setup_queues``). Call
    before the manager starts."""
    shared = make_shared(mgr, opts)
    ctrl, reconciler = setup_gpuworkload_controller(mgr, shared)
    inf, claims = shared.informers, None
    if shared.claims is not None and inf.resourceclaims is not None:
        claims = setup_claims(mgr, inf.resourceclaims, inf.pods.indexer, shared.states,
                              shared.claims)[1]
    member_claims = MemberClaimsReader(
        mgr.client, inf.resourceclaims.indexer, shared.dra.device_class, shared.dra.driver,
        inf.claimtemplates.indexer if inf.claimtemplates is not None else None,
    ) if shared.dra is not None and inf.resourceclaims is not None else None
    binder = setup_podbinding_controller(mgr, shared.states, shared.own_writes, pod_binding,
                                         shared.queues, member_claims
                                         )[1] if pod_binding is not None else None
    if pod_binding is not None:
        POD_GROUPS.set_source(GroupCounts(inf.pods.indexer, pod_binding.scheduler_name,
                                          owner_lookup(mgr)))
    evictor = setup_evictor(mgr, shared) if opts.evict_conflicting_pods else None
    return Controllers(shared, ctrl, reconciler, claims, binder, evictor)
