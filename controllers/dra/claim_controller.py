"""The claim controller of ``deviceExposure: dra`` (steps 4 and 5 of
controllers/dra/claims.py): every claim of ours has ``status.reservedFor`` equal to the
live pods that use it, and a claim no longer wanted that no pod uses loses its
allocation, then our finalizer, then goes. Claims whose workload is gone (or that a
crash left behind before their pod existed) are released the same way. It runs on
the leader, on the GPUWorkload reconciler's placement state: "wanted" is asked of the
same ledger that placed the claim, and the decision to release is made under its lock
(``ClaimManager.mark_releasing``), so a placement booked after it never adopts the
claim, even while the cache still shows it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog

from api.v1alpha1.keys import ATTEMPT_LABEL, CLAIM_FINALIZER, INDEX_LABEL, WORKLOAD_UID_LABEL
from api.v1alpha1.types import API_VERSION
from controllers.dra.claim_release import release_claim
from controllers.dra.claims import (
    POD_CLAIM_INDEX,
    ClaimManager,
    claim_placement,
    index_pods_by_claim,
)
from controllers.placement.source import PlacementStateSource
from internal.objects import JSON, object_key
from internal.scheduling.holdings import Allocation
from internal.scheduling.pods import controller_ref, pod_is_active, workload_owner
from internal.scheduling.resourceslices import DRA_API_VERSION
from runtime import (
    Builder,
    Conflict,
    Controller,
    FuncHandler,
    Manager,
    NotFound,
    Request,
    Result,
)
from runtime.informer import SharedIndexInformer
from runtime.store import OWNER_UID_INDEX, Indexer

log = structlog.get_logger("claims")


#: how often a wanted claim that no pod uses yet is looked at again (a booking can
#: be released without any event on the claim or its pods)
UNUSED_RECHECK = 2.0


def _wanted(claim: JSON, booking: Allocation | None) -> bool:
    """Does its workload's booking hold this claim's replica on its placement?"""
    ref = controller_ref(claim) or {}
    labels = claim["metadata"].get("labels") or {}
    if booking is None or (booking.uid and booking.uid != ref.get("uid")):
        return False
    if booking.owner != workload_owner(str(ref.get("uid")), labels.get(ATTEMPT_LABEL)):
        return False
    where = claim_placement(claim)
    return any(str(p.index) == labels.get(INDEX_LABEL) and where == (p.node, tuple(p.devices))
               for p in booking.placements)


class ClaimReconciler:
    """Steps 4-5 for every claim of ours: ``reservedFor`` follows the pods that use
    it; an unwanted claim no pod uses loses its allocation, our finalizer, and goes.

    | observed                                  | what it does                        |
    | ----------------------------------------- | ----------------------------------- |
    | not ours (no finalizer, not a workload's) | nothing (the ledger counts it)      |
    | used by live pods                         | reservedFor = those pods            |
    | wanted (its booking holds its placement)  | waits for its pod                   |
    | unwanted, a pod still uses it (live list) | waits for the pod to be gone        |
    | unwanted, unused                          | deallocates, drops finalizer, deletes |
    """

    def __init__(self, client: Any, claims: Indexer, pods: Indexer,
                 states: PlacementStateSource, manager: ClaimManager) -> None:
        self.client, self.claims, self.pods, self.states = client, claims, pods, states
        self.manager = manager

    def reconcile(self, req: Request) -> Result | None:
        claim = self.claims.get_by_name(req.name, req.namespace)
        if claim is None or not _ours(claim):
            return None
        meta = claim["metadata"]
        users = [p for p in self.pods.by_index(POD_CLAIM_INDEX, f"{req.namespace}/{req.name}")
                 if _uses(p)]
        if (claim.get("status") or {}).get("allocation"):
            self._reserve(claim, users)
        if users:
            return None
        # Decided under the bookings' lock: a placement booked after this point sees
        # the claim as going and waits for it (never adopts a claim being released).
        deleting = bool(meta.get("deletionTimestamp"))
        key = f"{meta['namespace']}/{(controller_ref(claim) or {}).get('name')}"
        if not self.manager.mark_releasing(
                claim, key, lambda booking: not deleting and _wanted(claim, booking)):
            return Result(requeue_after=UNUSED_RECHECK)
        if self._live_users(claim):
            self.manager.unmark(meta["uid"])
            return Result(requeue_after=UNUSED_RECHECK)  # the cache has not seen them yet
        self._release(claim)
        return None

    def _reserve(self, claim: JSON, users: list[JSON]) -> None:
        want = [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
                for p in sorted(users, key=lambda p: p["metadata"]["name"])]
        have = (claim.get("status") or {}).get("reservedFor") or []
        if sorted((r.get("uid"), r.get("name")) for r in have) == \
                sorted((r["uid"], r["name"]) for r in want):
            return
        status = {**(claim.get("status") or {}), "reservedFor": want or None}
        with contextlib.suppress(NotFound, Conflict):
            self.client.update_status({**claim, "status": status})
            log.info("claim.reserved", claim=object_key(claim), pods=[r["name"] for r in want])

    def _live_users(self, claim: JSON) -> bool:
        meta = claim["metadata"]
        uid = (controller_ref(claim) or {}).get("uid")
        pods = self.client.list_all("v1", "Pod", meta["namespace"],
                                    label_selector=f"{WORKLOAD_UID_LABEL}={uid}")
        return any(object_key(claim) in index_pods_by_claim(p) and _uses(p)
                   for p in pods.get("items") or ())

    def _release(self, claim: JSON) -> None:
        release_claim(self.client, claim)



def _ours(claim: JSON) -> bool:
    ref = controller_ref(claim)
    return CLAIM_FINALIZER in (claim["metadata"].get("finalizers") or ()) or (
        ref is not None and ref.get("kind") == "GPUWorkload"
        and str(ref.get("apiVersion", "")).startswith("gpu.orchestrator.dev/"))


def _uses(pod: JSON) -> bool:
    """A pod that may run with the claim: not finished. (A terminating pod still
    runs for its grace period, and keeps its devices.)"""
    return pod_is_active(pod)


def setup_claims(mgr: Manager, claims: SharedIndexInformer, pods: Indexer,
                 states: PlacementStateSource, manager: ClaimManager, workers: int = 2
                 ) -> tuple[Controller, ClaimReconciler]:
    """The claim controller, on the composition root's parts (controllers/setup.py):
    the ResourceClaim informer (indexed by owner), the Pod indexer (indexed by
    claim), the placement state and the claim manager the GPUWorkload reconciler
    uses."""
    reconciler = ClaimReconciler(mgr.client, claims.indexer, pods, states, manager)
    ctrl = (Builder(mgr).named("resourceclaims")
            .for_(DRA_API_VERSION, "ResourceClaim")
            .watches("v1", "Pod", _pod_claims)
            .watches(API_VERSION, "GPUWorkload", _workload_claims(claims.indexer))
            .with_options(max_concurrent_reconciles=workers)
            .complete(reconciler))
    # a released claim's mark goes with it
    claims.add_event_handler(FuncHandler(None, None, partial(_unmark, manager)))
    return ctrl, reconciler


def _unmark(manager: ClaimManager, obj: Any) -> None:
    manager.unmark(str(((getattr(obj, "obj", obj) or {}).get("metadata") or {}).get("uid")
                       or ""))


def _pod_claims(pod: JSON) -> list[Request]:
    out = []
    for key in index_pods_by_claim(pod):
        ns, name = key.split("/", 1)
        out.append(Request(ns, name))
    return out


def _workload_claims(claims: Indexer) -> Callable[[JSON], list[Request]]:
    def map_func(w: JSON) -> list[Request]:
        uid = (w.get("metadata") or {}).get("uid")
        return [Request(c["metadata"]["namespace"], c["metadata"]["name"])
                for c in claims.by_index(OWNER_UID_INDEX, uid)] if uid else []
    return map_func
