"""Dynamic Resource Allocation, write side: a ResourceClaim per replica, allocated by
us to exactly the devices of its placement (``deviceExposure: dra``).

Per replica, in order (each step is repaired by the next reconcile if a crash
stops the one before it; none is ever done twice):

1. ``ClaimManager.ensure`` creates the claim ``<workload>-<index>-gpus-<attempt>``
   (owned by the workload, with our finalizer), requesting exactly the chosen
   devices (a CEL selector on their UUIDs, else their minors);
2. writes its ``status.allocation``: results naming driver, pool and device, and a
   node selector on the node's name. The API server checks the shape, not whether
   the device is free: the ledger's booking (and the claims it counts as holders,
   kube-scheduler's included) is what makes it right;
3. the reconciler creates the pod bound to its node with ``spec.resourceClaims``
   naming the claim (``bind``), no ``nvidia.com/gpu`` and no host-index env;
4. ``claim_controller.ClaimReconciler`` keeps ``status.reservedFor`` equal to the
   live pods that use the claim;
5. and, once a claim is no longer wanted (its workload's booking no longer holds
   that replica's placement: deleted, finished, another attempt, a crash before
   the pod existed) and no pod uses it, removes its allocation, then our
   finalizer, then the claim (controllers/dra/claim_release.py). Claims nobody owns any
   more go the same way; a workload deleted while the manager runs without DRA
   releases its own once its pods are gone.

A claim whose allocation no longer matches its placement (edited by hand) is
reported; before its pod exists it is repaired, afterwards the attempt ends (the
pod may already run on the wrong devices): it is never silently trusted.

What a kubelet and the NVIDIA driver then do with the claim (prepare the devices,
inject CDI specs) cannot run on the local control plane; see docs/dra.md.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from api.v1alpha1.keys import (
    ATTEMPT_LABEL,
    CLAIM_FINALIZER,
    DEVICES_ANNOTATION,
    GPU_RESOURCE,
    INDEX_LABEL,
    NODE_ANNOTATION,
    WORKLOAD_LABEL,
    WORKLOAD_UID_LABEL,
)
from api.v1alpha1.types import GPUWorkload, Placement
from controllers.gpuworkload.child_api import PERMANENT_CREATE_ERRORS
from controllers.gpuworkload.children import child_name, owner_reference
from controllers.gpuworkload.reconcile_outcome import EndAttempt
from controllers.placement.source import PlacementStateSource
from internal.objects import JSON
from internal.scheduling.holdings import Allocation
from internal.scheduling.pods import controller_ref, parse_devices
from internal.scheduling.resourceslices import (
    DEFAULT_DEVICE_CLASS,
    DEFAULT_DRIVER,
    DRA_API_VERSION,
    selector_node,
)
from runtime import (
    AlreadyExists,
    ApiError,
    NotFound,
)
from runtime.events import EventRecorder
from runtime.store import Indexer

log = structlog.get_logger("claims")


#: the request in our claims, and the pod's name for the claim
REQUEST = "gpus"
#: pods by the claims they use: ``namespace/claim``
POD_CLAIM_INDEX = "resource-claim"


@dataclass
class DraOptions:
    driver: str = DEFAULT_DRIVER
    device_class: str = DEFAULT_DEVICE_CLASS


def claim_name(workload: str, index: int, attempt: int) -> str:
    return f"{child_name(workload, index)}-gpus-{attempt}"


def index_pods_by_claim(pod: JSON) -> list[str]:
    ns = (pod.get("metadata") or {}).get("namespace") or "default"
    return sorted({f"{ns}/{c['resourceClaimName']}"
                   for c in (pod.get("spec") or {}).get("resourceClaims") or ()
                   if c.get("resourceClaimName")})


def node_selector(node: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}


def _selector(driver: str, uuids: list[str] | None, devices: list[int]) -> str:
    if uuids:
        return f"device.attributes[{json.dumps(driver)}].uuid in {json.dumps(sorted(uuids))}"
    return f"device.attributes[{json.dumps(driver)}].minor in {json.dumps(sorted(devices))}"


def build_claim(w: GPUWorkload, raw: JSON, p: Placement, attempt: int, opts: DraOptions,
                uuids: list[str] | None) -> dict[str, Any]:
    """The ResourceClaim of replica ``p``: exactly its devices, owned by the workload."""
    return {
        "apiVersion": DRA_API_VERSION, "kind": "ResourceClaim",
        "metadata": {
            "name": claim_name(w.metadata.name, p.index, attempt),
            "namespace": w.metadata.namespace,
            "labels": {WORKLOAD_LABEL: w.metadata.name, INDEX_LABEL: str(p.index),
                       WORKLOAD_UID_LABEL: str(raw["metadata"]["uid"]),
                       ATTEMPT_LABEL: str(attempt)},
            "annotations": {NODE_ANNOTATION: p.node,
                            DEVICES_ANNOTATION: ",".join(map(str, p.devices))},
            "ownerReferences": [owner_reference(raw)],
            "finalizers": [CLAIM_FINALIZER],
        },
        "spec": {"devices": {"requests": [{"name": REQUEST, "exactly": {
            "deviceClassName": opts.device_class, "allocationMode": "ExactCount",
            "count": len(p.devices),
            "selectors": [{"cel": {"expression": _selector(opts.driver, uuids, p.devices)}}],
        }}]}},
    }


def bind(child: dict[str, Any], claim: str) -> dict[str, Any]:
    """The pod (or the Job's pod template) uses ``claim`` for its GPUs: every
    container lists it, and nothing asks the device plugin for ``nvidia.com/gpu``."""
    spec = child["spec"]["template"]["spec"] if child["kind"] == "Job" else child["spec"]
    spec["resourceClaims"] = [c for c in spec.get("resourceClaims") or ()
                              if c.get("name") != REQUEST]
    spec["resourceClaims"].append({"name": REQUEST, "resourceClaimName": claim})
    for c in spec.get("containers") or ():
        res = c.setdefault("resources", {})
        for part in ("limits", "requests"):
            if part in res:
                res[part].pop(GPU_RESOURCE, None)
        claims = [x for x in res.get("claims") or () if x.get("name") != REQUEST]
        res["claims"] = [*claims, {"name": REQUEST}]
    return child


def claim_placement(claim: JSON) -> tuple[str, tuple[int, ...]] | None:
    """(node, devices) the claim was made for (its annotations); None if unreadable."""
    ann = (claim.get("metadata") or {}).get("annotations") or {}
    try:
        devices = parse_devices(ann.get(DEVICES_ANNOTATION)) or []
    except ValueError:
        return None
    node = ann.get(NODE_ANNOTATION)
    return (str(node), tuple(devices)) if node else None


def allocation_problem(claim: JSON, want: dict[str, Any]) -> str:
    """'' when the claim's allocation is ``want`` (same node, same devices), else
    what differs, for a message."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    have = {(r.get("driver"), r.get("pool"), r.get("device"))
            for r in (alloc.get("devices") or {}).get("results") or ()}
    need = {(r["driver"], r["pool"], r["device"]) for r in want["devices"]["results"]}
    node, want_node = selector_node(alloc), selector_node(want)
    if have == need and node == want_node:
        return ""
    shown = ",".join(sorted(f"{p}/{d}" for _, p, d in have)) or "nothing"
    return (f"allocated to {shown} on {node or 'no node'}, not "
            f"{','.join(sorted(f'{p}/{d}' for _, p, d in need))} on {want_node}")


class ClaimManager:
    """The reconciler's side (steps 1-3): called for each replica before its pod."""

    bind = staticmethod(bind)

    def __init__(self, client: Any, recorder: EventRecorder, claims: Indexer,
                 states: PlacementStateSource, opts: DraOptions) -> None:
        self.client, self.recorder, self.claims = client, recorder, claims
        self.states, self.opts = states, opts

    def mark_releasing(self, claim: JSON, key: str,
                       wanted: Callable[[Allocation | None], bool]) -> bool:
        """Atomically with the bookings: unless ``wanted`` (asked with workload
        ``key``'s booking) keeps it, ``claim`` is marked as going, and ``ensure``
        adopts it no more (it waits for it to be gone, even while the cache still
        shows it). True when marked."""
        uid = str((claim.get("metadata") or {}).get("uid") or "")
        return self.states.get().release_claim_unless(uid, key, wanted)

    def unmark(self, uid: str) -> None:
        state = self.states.current  # never built here (informer threads call this)
        if state is not None:
            state.claim_gone(uid)

    def _going(self, claim: JSON) -> bool:
        meta = claim.get("metadata") or {}
        return bool(meta.get("deletionTimestamp")) or \
            self.states.get().claim_going(str(meta.get("uid")))

    def allocation(self, p: Placement, *, published: bool = True) -> dict[str, Any]:
        """The allocation of replica ``p``. Its devices must be in the slices to be
        allocated now (``published``); a claim allocated earlier is checked against
        NVIDIA's names (pool = node, ``gpu-<minor>``) while its driver republishes."""
        results = self.states.get().slice_results(p.node, p.devices, REQUEST)
        if results is None and not published:
            results = [{"request": REQUEST, "driver": self.opts.driver, "pool": p.node,
                        "device": f"gpu-{d}"} for d in p.devices]
        if results is None:
            raise EndAttempt("DeviceNotPublished", f"{p.node}: device(s) "
                             f"{','.join(map(str, p.devices))} are not in the ResourceSlices "
                             f"of {self.opts.driver}")
        return {"devices": {"results": results}, "nodeSelector": node_selector(p.node)}

    def ensure(self, w: GPUWorkload, raw: JSON, p: Placement, attempt: int,
               pod_exists: bool) -> str | None:
        """Makes sure replica ``p`` has its claim, allocated to exactly its devices.
        Returns the claim's name; None when an older claim of that name must go
        first (requeue). Raises EndAttempt when the attempt cannot go on."""
        name = claim_name(w.metadata.name, p.index, attempt)
        ns = w.metadata.namespace or "default"
        want = self.allocation(p, published=not pod_exists)
        claim = self.claims.get_by_name(name, ns)
        if claim is None:
            uuids = self.states.get().uuids(p.node, p.devices)
            claim = self._create(build_claim(w, raw, p, attempt, self.opts, uuids))
        ref = controller_ref(claim)
        if ref is None or ref.get("uid") != raw["metadata"]["uid"]:
            raise EndAttempt("ChildNameTaken", f"ResourceClaim {name} already exists and is "
                             f"not owned by this workload; delete or rename it")
        if self._going(claim):
            return None  # a previous one of this name is being released
        if claim_placement(claim) != (p.node, tuple(p.devices)):
            if pod_exists:
                raise EndAttempt("ClaimMismatch", f"ResourceClaim {name} was made for "
                                 f"another placement than {p.node}:{p.devices}")
            with contextlib.suppress(NotFound):
                self.client.delete(DRA_API_VERSION, "ResourceClaim", name, namespace=ns)
            return None
        if not (claim.get("status") or {}).get("allocation"):
            claim = self._live(name, ns)
        problem = allocation_problem(claim, want) if (claim.get("status") or {}).get(
            "allocation") else "not allocated"
        if not problem:
            return name
        message = f"ResourceClaim {ns}/{name} is {problem}"
        if pod_exists:
            # Allocated before its pod was made: someone changed it since, and the
            # pod may already use the wrong devices (or none).
            log.warning("claim.mismatch", claim=f"{ns}/{name}", problem=problem)
            raise EndAttempt("ClaimMismatch", f"{message}, under its running pod")
        if problem != "not allocated":
            log.warning("claim.mismatch", claim=f"{ns}/{name}", problem=problem)
            self.recorder.warning(raw, "ClaimMismatch", f"{message}; repairing")
            claim = self._write(claim, None)
        self._write(claim, want)
        log.info("claim.allocated", claim=f"{ns}/{name}", node=p.node,
                 devices=",".join(map(str, p.devices)))
        return name

    def _create(self, obj: dict[str, Any]) -> JSON:
        meta = obj["metadata"]
        try:
            return self.client.create(obj)
        except AlreadyExists:
            return self._live(meta["name"], meta["namespace"])
        except ApiError as exc:
            if exc.status in PERMANENT_CREATE_ERRORS:
                raise EndAttempt("ChildCreateFailed", f"cannot create ResourceClaim "
                                 f"{meta['name']}: {exc.message or exc}") from None
            raise

    def _live(self, name: str, ns: str) -> JSON:
        return self.client.get(DRA_API_VERSION, "ResourceClaim", name, namespace=ns)

    def _write(self, claim: JSON, allocation: dict[str, Any] | None) -> JSON:
        """Sets (or, with None, removes) the allocation; removing it also empties
        ``reservedFor`` (the API requires it). Conflict propagates (requeue)."""
        status = dict(claim.get("status") or {})
        status["allocation"] = allocation
        if allocation is None:
            status.pop("reservedFor", None)
        return self.client.update_status({**claim, "status": status})
