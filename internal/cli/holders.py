"""Who holds which GPU, computed by the controller's own code from API objects.

``kubectl gpu`` must never disagree with the placing controller, so it does not
count holders itself: it rebuilds the controller's ledger the way
``controllers.placement.state.PlacementState.rebuild`` does, from the same kinds of
objects, in the same order:

1. pods that are not the seed path's, and our Jobs (``Ledger.rebuild``: a pod with
   an unreadable devices annotation holds its ``nvidia.com/gpu`` request, counted;
   what runs wins every conflict);
2. every allocated ResourceClaim of the DRA driver (``claim_holding``), ours and
   anybody's, until its allocation is removed (a ``dra`` pod group member's claim
   while its pod is bound: the pod, booked in 3, holds the same devices and names
   the member);
3. the seed path's pods (``controllers.podbinding.seedbook.SeedBook``: the devices annotation,
   else the map line, else the request, at least one GPU);
4. committed placements of workloads still holding devices (``book_placements``);
5. the nominations of preemptors still waiting for their victims.

Node capacity comes from ``Snapshot.build`` over the stale-judged GPUNodes, merged
with the driver's ResourceSlices, as the controller sees them. What the controller
cannot book (a placement colliding with running pods, an unreadable annotation or
claim) is returned as a problem, in the controller's words.

The only thing the plugin cannot see is a decision assumed in the controller's
memory and not yet written (a second or so): the API is all it reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from api.v1alpha1.keys import WORKLOAD_LABEL
from controllers.podbinding.seedbook import (
    DEFAULT_SCHEDULER_NAME,
    SeedBook,
    is_seed_key,
    read_bound,
)
from internal.objects import JSON, object_key
from internal.scheduling.jobs import JobHolding
from internal.scheduling.ledger import Allocation, Ledger
from internal.scheduling.podindex import pod_index
from internal.scheduling.pods import controller_ref, pod_holder_key, pod_is_active, pod_uid
from internal.scheduling.resourceslices import (
    GROUP_KEY_PREFIX,
    ClaimHolding,
    SliceInventory,
    claim_holder_key,
    claim_holding,
    claim_owner,
    inventory_of,
    with_slices,
)
from internal.scheduling.snapshot import Snapshot, gpunode_at


@dataclass
class Holdings:
    """The controller's picture: capacity (``snapshot``), holders (``ledger``), the
    driver's slices, a display name per ledger key, and the problems found."""

    snapshot: Snapshot
    ledger: Ledger
    published: SliceInventory
    names: dict[str, str]
    problems: list[str]

    def label(self, a: Allocation, node: str, device: int | None = None) -> str:
        """How a user reads holder ``a`` on ``node`` (``device``: the one shown):
        ``ns/workload[replica]``, ``ns/pod/name``, ``ns/claim/name``, ``ns/job/name``,
        ``ns/statefulset/name[replica]``."""
        if a.key in self.names:
            return self.names[a.key]
        if a.holder:
            return a.name
        ns, _, name = a.key.partition("/")
        if is_seed_key(a.key):
            kind, _, ns = ns.partition(":")
            base = f"{ns}/{kind.lower()}/{name}"
            if kind == "Pod":
                return base
        else:
            base = a.key
        idx = sorted({p.index for p in a.placements if p.node == node
                      and ((device is None and not p.devices)
                           or (device is not None and device in p.devices))})
        return f"{base}[{','.join(map(str, idx))}]" if idx else base

    def device_holders(self, node: str, device: int) -> list[str]:
        """One name per owner holding ``device`` (a booking's before its pods');
        two names are a conflict the controller reports."""
        return self._by_owner(node, lambda a: any(p.node == node and device in p.devices
                                                  for p in a.placements), device)

    def counted(self, node: str) -> dict[str, int]:
        """Holder name -> GPUs held on ``node`` without a device index (the
        ledger's per-owner count: a booking, its pod and its Job are the same GPUs)."""
        by_owner = self.ledger.counted(node)
        names = self._owner_names(node, lambda a: node in a.counted, None)
        return {names.get(o, o): n for o, n in sorted(by_owner.items()) if n}

    def _owner_names(self, node: str, holds: Any, device: int | None) -> dict[str, str]:
        best: dict[str, tuple[int, str]] = {}
        for a in self.ledger.allocations().values():
            if not holds(a):
                continue
            rank = 0 if not a.holder else 2 if a.job else 1
            name = self.label(a, node, device)
            if a.owner not in best or (rank, name) < best[a.owner]:
                best[a.owner] = (rank, name)
        return {o: n for o, (_, n) in best.items()}

    def _by_owner(self, node: str, holds: Any, device: int) -> list[str]:
        owners = self.ledger.device_owners(node, device)
        names = self._owner_names(node, holds, device)
        return sorted({names[o] for o in owners if o in names})


def _pod_name(pod: JSON) -> str:
    """``ns/workload[replica]`` for a pod of a workload, else ``ns/pod/name``."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    owner = (meta.get("labels") or {}).get(WORKLOAD_LABEL)
    index, _ = pod_index(pod)
    if owner is not None and index is not None:
        return f"{ns}/{owner}[{index}]"
    return f"{ns}/pod/{meta.get('name') or ''}"


def _ns_name(text: str, kind: str) -> str:
    ns, _, name = text.partition("/")
    return f"{ns}/{kind}/{name}"


def controller_holdings(
    nodes: Iterable[JSON], gpunodes: Iterable[JSON], workloads: list[JSON],
    pods: Iterable[JSON], *, now: datetime, stale_after: timedelta | float,
    jobs: Iterable[JSON] = (), slices: Iterable[JSON] = (), claims: Iterable[JSON] = (),
    driver: str, scheduler_name: str = DEFAULT_SCHEDULER_NAME,
) -> Holdings:
    """The ledger the controller would rebuild from these objects at ``now``."""
    pods = list(pods)
    jobs = list(jobs)
    book = SeedBook(scheduler_name)
    published = inventory_of(slices, driver)
    views = with_slices([gpunode_at(g, now, stale_after) for g in gpunodes], published)
    ours = [p for p in pods if not book.owns(p)]
    snapshot = Snapshot.build(nodes, views)  # the nodes first, as the controller's
    snapshot.attach(fresh := Ledger())
    ledger, problems = Ledger.rebuild(workloads, ours, jobs=jobs, placements=False,
                                      nominations=False, into=fresh)
    names: dict[str, str] = {pod_holder_key(pod_uid(p)): _pod_name(p) for p in ours}
    for job in jobs:
        names[JobHolding(str((job.get("metadata") or {}).get("uid") or object_key(job)),
                         "", "", (), 0, "").key] = _ns_name(object_key(job), "job")
    # a dra pod group member's claim holds what its bound pod holds (the pod binding
    # allocated it to the pod's devices): shown as the member, booked below
    members = {pod_uid(p) for p in pods if book.owns(p) and pod_is_active(p)
               and (p.get("spec") or {}).get("nodeName")}
    for claim in claims:
        meta = claim.get("metadata") or {}
        if claim_owner(claim).startswith(GROUP_KEY_PREFIX) and \
                (controller_ref(claim) or {}).get("uid") in members:
            continue
        key = claim_holder_key(str(meta.get("uid") or ""))
        problems += ledger.sync(key, lambda c=claim: claim_holding(c, published), key)
        names[key] = f"{meta.get('namespace') or 'default'}/claim/{meta.get('name') or ''}"
    problems += book.rebuild(ledger, pods)
    # the book leaves an unreadable annotation to the pod's reconcile to report
    problems += [f"pod {object_key(p)}: {why}" for p in pods
                 if book.owns(p) and pod_is_active(p) for why in read_bound(p)[1]]
    problems += ledger.book_placements(workloads)
    problems += ledger.book_nominations(workloads)
    book.refill(ledger, pods)
    return Holdings(snapshot, ledger, published, names, problems)


__all__ = ["ClaimHolding", "Holdings", "controller_holdings"]
