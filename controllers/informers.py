"""The manager's informers, made once with every index any controller reads, and
the handlers that feed the two shared parts from them: the placement state (one
``placement_handler`` per kind) and our own writes (``feed_own_writes``).

Every controller is handed the ``Informers`` it reads; none asks the manager for
an informer of its own, so an index one controller needs is declared here, beside
the others, and no informer is made twice with different indexes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from api.v1alpha1.types import API_VERSION
from controllers.dra.claims import POD_CLAIM_INDEX, index_pods_by_claim
from controllers.placement.events import CacheEvents
from controllers.placement.source import PlacementStateSource
from controllers.shared.own_writes import OwnWrites
from internal.scheduling.resourceslices import DRA_API_VERSION
from runtime import FuncHandler, Manager
from runtime.informer import SharedIndexInformer
from runtime.store import (
    NODE_NAME_INDEX,
    OWNER_UID_INDEX,
    index_by_node_name,
    index_by_owner_uid,
)

PLACEMENT_NODE_INDEX = "placement-node"

#: one of the placement state's handlers (``CacheEvents.on_*``), called with the
#: state's ``events`` and the object
Change = Callable[[CacheEvents, Any], None]


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """The Node as the manager keeps it: its metadata, spec, capacity, allocatable and
    each condition's type and status, all that the placement state reads (readiness,
    labels, taints, cordon, what a pod may request, the Event on a refused node).
    A kubelet's node also lists its images, addresses, versions and volumes, and
    every condition's times and messages: 5-15 KiB a node in the cache, read by
    nobody here (kube-scheduler keeps them for its image-locality score). Objects
    fresh from the wire are ours to change, so this edits in place."""
    status = node.get("status")
    if isinstance(status, dict):
        node["status"] = {k: status[k] for k in ("capacity", "allocatable") if k in status}
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            node["status"]["conditions"] = [
                {"type": c.get("type"), "status": c.get("status")}
                for c in conditions if isinstance(c, dict)]
    return node


#: a pod's status fields no reader here reads (the manager reads its phase, reason,
#: message, conditions, nominated node and claims' statuses): a kubelet's per-container
#: states, the pod's addresses, its start and QoS class; kube-scheduler's cache keeps
#: none of them either. A reader of one takes it out of this list.
POD_STATUS_UNREAD = ("containerStatuses", "initContainerStatuses",
                     "ephemeralContainerStatuses", "podIP", "podIPs", "hostIP", "hostIPs",
                     "startTime", "qosClass")


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The Pod as the manager keeps it: all but ``POD_STATUS_UNREAD`` and each
    condition's ``lastProbeTime`` (null in every pod a kubelet writes): 1.4 KiB of a
    running benchmark pod's 6.5 KiB in the cache, more for a pod of several
    containers. In place, as ``slim_node``."""
    status = pod.get("status")
    if isinstance(status, dict):
        for k in POD_STATUS_UNREAD:
            status.pop(k, None)
        for c in status.get("conditions") or ():
            if isinstance(c, dict):
                c.pop("lastProbeTime", None)
    return pod


def index_by_placement_node(obj: Any) -> list[str]:
    return sorted({p.get("node") for p in (obj.get("status") or {}).get("placements") or ()
                   if p.get("node")})


@dataclass(frozen=True)
class Informers:
    workloads: SharedIndexInformer
    pods: SharedIndexInformer
    jobs: SharedIndexInformer
    nodes: SharedIndexInformer
    gpunodes: SharedIndexInformer
    #: whether a workload's priority is an admin's (it may then preempt elsewhere)
    classes: SharedIndexInformer
    #: DRA on and served; else None
    resourceslices: SharedIndexInformer | None = None
    resourceclaims: SharedIndexInformer | None = None
    #: a pod group's members not made yet in dra mode: what their templates ask
    claimtemplates: SharedIndexInformer | None = None

    def class_value(self, name: str) -> int | None:
        """A PriorityClass's value by name (None: no such class), from the cache."""
        pc = self.classes.indexer.get_by_name(name)
        value = pc.get("value") if pc is not None else None
        return value if isinstance(value, int) else None


def make_informers(mgr: Manager, dra: bool, templates: bool = True) -> Informers:
    """The informers every controller shares; DRA's with ``dra``, and the
    ResourceClaimTemplates' too where the manager may read them (``templates``)."""
    owner = {OWNER_UID_INDEX: index_by_owner_uid}
    pods = {**owner, NODE_NAME_INDEX: index_by_node_name}
    if dra:
        pods[POD_CLAIM_INDEX] = index_pods_by_claim  # the claim controller's users
    return Informers(
        workloads=mgr.informer_for(API_VERSION, "GPUWorkload",
                                   indexers={PLACEMENT_NODE_INDEX: index_by_placement_node}),
        pods=mgr.informer_for("v1", "Pod", indexers=pods, transform=slim_pod),
        jobs=mgr.informer_for("batch/v1", "Job", indexers=owner),
        nodes=mgr.informer_for("v1", "Node", transform=slim_node),
        gpunodes=mgr.informer_for(API_VERSION, "GPUNode"),
        classes=mgr.informer_for("scheduling.k8s.io/v1", "PriorityClass"),
        resourceslices=mgr.informer_for(DRA_API_VERSION, "ResourceSlice") if dra else None,
        resourceclaims=mgr.informer_for(DRA_API_VERSION, "ResourceClaim", indexers=owner)
        if dra else None,
        claimtemplates=mgr.informer_for(DRA_API_VERSION, "ResourceClaimTemplate")
        if dra and templates else None)


class _PlacementFeed:
    """One kind's events into the placement state the source holds now (``current``:
    fed while it is being filled, so an event during the fill reaches it)."""

    def __init__(self, states: Any, kind: str, on_change: Change, on_delete: Change) -> None:
        self.states, self.kind = states, kind
        self.on_change, self.on_delete = on_change, on_delete

    def added(self, obj: Any) -> None:
        self._deliver(self.on_change, "add", obj)

    def updated(self, old: Any, new: Any) -> None:
        self._deliver(self.on_change, "update", new)

    def deleted(self, obj: Any) -> None:
        self._deliver(self.on_delete, "delete", obj)

    def lost(self, op: str, obj: Any, exc: BaseException) -> None:
        state = self.states.current
        if state is not None:
            state.invalidate(f"the {self.kind} {op} handler raised {type(exc).__name__}: {exc}")

    def _deliver(self, change: Change, op: str, obj: Any) -> None:
        state = self.states.current
        if state is not None:
            state.apply_event(partial(change, state.events, obj), partial(self.lost, op, obj))


def placement_handler(states: PlacementStateSource, kind: str, on_change: Change,
                      on_delete: Change) -> FuncHandler:
    """The placement state's handler of one kind: adds and updates go to
    ``on_change`` (a ``CacheEvents`` method), deletes to ``on_delete``. A call that
    raises loses that event, so the state may be short of a holder: it is
    invalidated and filled again from the caches before the next placement
    (``PlacementStateSource.get``). Inline: the state's updates are memory only, so
    they run on the watch's thread (runtime/informer.py), through the state's event
    gate, which defers an event rather than wait for a decide
    (controllers/placement/event_gate.py)."""
    feed = _PlacementFeed(states, kind, on_change, on_delete)
    return FuncHandler(feed.added, feed.updated, feed.deleted,
                       name=f"placement-{kind.lower()}", on_error=feed.lost, inline=True)


def feed_placement(informers: Informers, states: PlacementStateSource,
                   kinds: tuple[str, ...]) -> None:
    """Adds the placement state's handler of each of ``kinds`` to its informer."""
    table: dict[str, tuple[SharedIndexInformer | None, Change, Change]] = {
        "Node": (informers.nodes, CacheEvents.on_node, CacheEvents.on_node_deleted),
        "GPUNode": (informers.gpunodes, CacheEvents.on_gpunode,
                    CacheEvents.on_gpunode_deleted),
        "Pod": (informers.pods, CacheEvents.on_pod, CacheEvents.on_pod_deleted),
        "Job": (informers.jobs, CacheEvents.on_job, CacheEvents.on_job_deleted),
        "GPUWorkload": (informers.workloads, CacheEvents.on_workload,
                        CacheEvents.on_workload_deleted),
        "ResourceSlice": (informers.resourceslices, CacheEvents.on_resourceslice,
                          CacheEvents.on_resourceslice_deleted),
        "ResourceClaim": (informers.resourceclaims, CacheEvents.on_claim,
                          CacheEvents.on_claim_deleted),
    }
    for kind in kinds:
        informer, on_change, on_delete = table[kind]
        if informer is not None:
            informer.add_event_handler(placement_handler(states, kind, on_change, on_delete))


def feed_own_writes(informers: Informers, own_writes: OwnWrites) -> None:
    """The caches show our writes: the GPUWorkload, Pod and Job informers tell
    ``own_writes`` what they now hold (inline: a leaf lock, memory only)."""
    for informer in (informers.workloads, informers.pods, informers.jobs):
        informer.add_event_handler(FuncHandler(
            own_writes.observed, partial(_observed_update, own_writes), own_writes.deleted,
            name=f"own-writes-{informer.kind.lower()}", inline=True))


def _observed_update(own_writes: OwnWrites, old: Any, new: Any) -> None:
    own_writes.observed(new)
