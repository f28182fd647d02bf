"""The pod-binding controller's wiring: the shared Pod informer's events that wake
it (``pod_predicate``) and the controller made on the manager
(``setup_podbinding_controller``); the reconciler is in ``controller.py``."""

from __future__ import annotations

from controllers.gpuworkload.setup import only_in
from controllers.placement.source import PlacementStateSource
from controllers.podbinding.controller import PodBindingOptions, PodBindingReconciler
from controllers.podbinding.memberclaims import MemberClaimsReader
from controllers.podbinding.owners import owner_lookup, requeue_members
from controllers.podbinding.seedbook import SeedBook, pod_meta, pod_spec
from controllers.queues.book import QueueBook
from controllers.shared.own_writes import OwnWrites
from internal.scheduling.podgroups import pod_group
from internal.scheduling.pods import pod_is_active
from runtime import Builder, Controller, Manager
from runtime.predicates import Funcs, UpdateEvent


def pod_predicate(book: SeedBook) -> Funcs:
    """This scheduler's pods: every event while unbound; once bound, only binding,
    finishing and deletion."""

    def update(e: UpdateEvent) -> bool:
        if not book.owns(e.new):
            return False
        new_spec, old_spec = pod_spec(e.new), pod_spec(e.old)
        if not new_spec.get("nodeName") or new_spec.get("nodeName") != old_spec.get("nodeName"):
            return True
        if pod_is_active(e.old) != pod_is_active(e.new):
            return True
        return pod_meta(e.old).get("deletionTimestamp") != pod_meta(e.new).get("deletionTimestamp")

    return Funcs(create=lambda e: book.owns(e.obj), update=update,
                 delete=lambda e: book.owns(e.obj), generic=lambda e: book.owns(e.obj))


def setup_podbinding_controller(mgr: Manager, states: PlacementStateSource,
                                own_writes: OwnWrites, opts: PodBindingOptions | None = None,
                                queues: QueueBook | None = None,
                                claims: MemberClaimsReader | None = None,
                                ) -> tuple[Controller, PodBindingReconciler]:
    """Adds the pod-binding controller on the shared Pod informer, booking in the
    manager's one placement state (``states``, the GPUWorkload reconciler's) and
    recording its Bindings in the controller's ``own_writes``. Call before the
    manager starts: its book is registered with the source before the state is
    built (``add_pod_book`` refuses after). With ``queues``, their manager asks it
    how old a group it did not admit is (``group_dates``). ``claims``: the
    ResourceClaim cache and DRA's options, with DRA on (a ``dra`` member's claims,
    ``memberclaims.py``)."""
    opts = opts or PodBindingOptions()
    pods = mgr.informer_for("v1", "Pod")
    book = SeedBook(opts.scheduler_name)
    states.add_pod_book(book)
    owners = owner_lookup(mgr)
    reconciler = PodBindingReconciler(mgr.client, mgr.event_recorder(opts.scheduler_name),
                                      pods.indexer, states, book, opts, own_writes,
                                      recognise=lambda pod: pod_group(pod, owners),
                                      claims=claims)
    ctrl = (Builder(mgr).named("podbinding")
            .for_("v1", "Pod", pod_predicate(book))
            .with_options(max_concurrent_reconciles=opts.workers)
            .complete(only_in(opts.namespaces, reconciler)))
    reconciler.enqueue_after = ctrl.queue.add_after
    book.on_evict = reconciler.evict_holder
    book.on_refusal = reconciler.holder_refusal
    if queues is not None:  # a group admitted before a restart keeps its age
        queues.manager.group_dates = reconciler.group_created
    # an owner kind served after the start: its pods are read again once it is watched
    owners.when_served(requeue_members(pods.indexer, book.owns, ctrl.queue.add))
    return ctrl, reconciler

