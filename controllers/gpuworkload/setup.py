"""The GPUWorkload controller and the intruder evictor, on the parts the
composition root made (``controllers/setup.py``: the informers, own writes, the
placement state, the status writer, the claims, the workload queue).

Clients, as kube-scheduler has them: the workers' (the manager's) sends what commits
a placement (the bound pod, a gang's status); the status writer's, with its own token
bucket of the same size, carries the asynchronous status writes and our finalizer;
Events go through the manager's Events client (the root's recorder).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from api.v1alpha1.types import API_VERSION
from controllers.dra.availability import DraUnavailableGate, status_submitter
from controllers.gpuworkload.backstop import Backstop
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
from controllers.placement.source import PlacementStateSource
from controllers.shared.child_news import ChildNews
from controllers.shared.echoes import OwnEchoes
from internal.objects import JSON
from internal.scheduling.resourceslices import DRA_API_VERSION
from runtime import Builder, Controller, Manager, Request
from runtime.store import OWNER_UID_INDEX, Indexer
from runtime.ticker import Ticker

if TYPE_CHECKING:
    from controllers.setup import Shared


def only_in(namespaces: frozenset[str], reconciler: Any) -> Any:
    """``reconciler``, or a reconcile function that ignores requests outside
    ``namespaces`` (the manager's --namespaces; RBAC from config/namespaced matches)."""
    if not namespaces:
        return reconciler

    def reconcile(req: Request) -> Any:
        return reconciler.reconcile(req) if req.namespace in namespaces else None
    return reconcile


def setup_gpuworkload_controller(mgr: Manager, shared: Shared
                                  ) -> tuple[Controller, GPUWorkloadReconciler]:
    """The GPUWorkload controller (``shared.opts.workers`` workers) and its backstop."""
    opts, inf, writer = shared.opts, shared.informers, shared.status_writer
    backstop = Backstop(inf.workloads.indexer.list, shared.workload_queue.add_key,
                        opts.resync_unsettled) if opts.resync_unsettled > 0 else None
    reconciler = GPUWorkloadReconciler(
        mgr.client, shared.recorder, inf.workloads.indexer, inf.pods.indexer,
        inf.jobs.indexer, shared.states, options=_options(mgr, shared), status_writer=writer,
        backstop=backstop, claims=shared.claims, own_writes=shared.own_writes,
        dra_why=shared.dra_why)
    gated: Any = reconciler if shared.dra is not None else DraUnavailableGate(
        reconciler.reconcile, inf.workloads.indexer, opts.default_exposure, shared.dra_why,
        shared.recorder, writer.submit if writer is not None else status_submitter(mgr.client),
        shared.own_writes.view, has_children=_Children((inf.pods.indexer, inf.jobs.indexer)))
    ctrl = _builder(mgr, shared.dra is not None, inf.jobs.indexer,
                    OwnEchoes(shared.own_writes)).with_options(
        max_concurrent_reconciles=opts.workers).complete(only_in(opts.namespaces, gated))
    shared.workload_queue.controller.set(ctrl)
    if backstop is not None:
        mgr.add(Ticker("backstop", backstop.period / 2, backstop.sweep))
    return ctrl, reconciler


def _options(mgr: Manager, shared: Shared) -> Options:
    opts = shared.opts
    return Options(default_exposure=opts.default_exposure,
                   default_strategy=opts.default_strategy,
                   check_children=ChildDryRun(mgr.client, opts.default_exposure).check
                   if opts.dry_run_children else None)


def _builder(mgr: Manager, dra: bool, jobs: Indexer, echoes: OwnEchoes) -> Builder:
    builder = (Builder(mgr).named("gpuworkload")
               # our own writes coming back wake nobody (controllers/shared/echoes.py),
               # nor a child's update that changes nothing a reconcile reads of it
               # (controllers/shared/child_news.py)
               .for_(API_VERSION, "GPUWorkload", echoes)
               .owns("v1", "Pod", echoes, ChildNews())
               .owns("batch/v1", "Job", echoes, ChildNews())
               # a Job child's pod: its workload's phase is read from it
               .watches("v1", "Pod", workload_of_job_pod(jobs, API_VERSION, "GPUWorkload"),
                        ChildNews()))
    # an edited claim is seen
    return builder.owns(DRA_API_VERSION, "ResourceClaim") if dra else builder


class _Children:
    """Whether a workload has children in the caches (its pods or Jobs)."""

    def __init__(self, indexers: tuple[Indexer, ...]) -> None:
        self.indexers = indexers

    def __call__(self, raw: JSON) -> bool:
        uid = raw["metadata"].get("uid")
        return any(i.by_index(OWNER_UID_INDEX, uid) for i in self.indexers)


# ------------------------------------------------------------------ the evictor


class _LedgerReads:
    """What the evictor asks the placement state; nothing before it is ready (the
    sweep builds it)."""

    def __init__(self, states: PlacementStateSource) -> None:
        self.states = states

    def owned(self, pod: JSON) -> bool:
        return any(b.owns(pod) for b in self.states.pod_books)

    def active(self) -> bool:
        return self.states.if_ready() is not None

    def booked_child(self, pod: JSON) -> str:
        return booked_child(self.states.if_ready(), pod)

    def over_commits(self, pod: JSON) -> str:
        return over_commits(self.states.if_ready(), pod)


class _Sweep:
    """The evictor's sweep of every cached pod (a leader's Ticker)."""

    def __init__(self, states: PlacementStateSource, evictor: IntruderEvictor,
                 pods: Indexer) -> None:
        self.states, self.evictor, self.pods = states, evictor, pods

    def run(self) -> None:
        self.states.get()  # the ledger, built from the caches if no reconcile has yet
        self.evictor.sweep(self.pods.list())


def setup_evictor(mgr: Manager, shared: Shared) -> IntruderEvictor:
    """Evicts pods that name devices nobody of ours gave them, or over-commit their
    node (controllers/gpuworkload/intruders.py): on every Pod event, and a sweep."""
    reads, pods = _LedgerReads(shared.states), shared.informers.pods
    evictor = IntruderEvictor(mgr.client, shared.recorder, reads.owned, reads.active,
                              shared.opts.namespaces, booked_child=reads.booked_child,
                              over_commits=reads.over_commits)
    pods.add_event_handler(evictor.handler())  # inline: no thread woken per pod event
    mgr.add(Ticker("intruders", SWEEP_PERIOD, _Sweep(shared.states, evictor, pods.indexer).run))
    return evictor
