"""The children of a GPUWorkload: one Pod (or Job) per replica, bound to its node
with the device environment of the exposure mode, and a headless Service for gangs.

Pure functions from the workload and its placement to manifests; the reconciler
creates them. Names are deterministic (``<workload>-<index>``), so a crash between
the status write and the creation is repaired by the next reconcile, never doubled.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from api.v1alpha1.keys import (
    ATTEMPT_LABEL,
    DEVICES_ANNOTATION,
    EXPOSURE_ANNOTATION,
    GPU_RESOURCE,
    INDEX_LABEL,
    MIG_ANNOTATION,
    NODE_ANNOTATION,
    SHARE_ANNOTATION,
    SPEC_HASH_ANNOTATION,
    WORKLOAD_LABEL,
    WORKLOAD_UID_LABEL,
)
from api.v1alpha1.types import API_VERSION, DeviceExposure, GPUWorkload, Placement, WorkloadKind
from internal.scheduling import exposure as exp
from internal.scheduling.sharefilter import is_mps

MASTER_PORT = "29500"
DEFAULT_IMAGE = "busybox:1.36"

#: uuids(node, devices) -> the devices' UUIDs, or None when the node has no GPUNode
UuidLookup = Callable[[str, list[int]], list[str] | None]


def spec_hash(w: GPUWorkload) -> str:
    """What a child was made from, as far as an allowed edit can change it: the
    template and the replica count (a gang's env names its size). Remembered per
    workload (``SpecHashes``): every reconcile asks it (``spec_change``), and so does
    every child built."""
    return _HASHES.of(w)


def _digest(template: Any, replicas: int) -> str:
    body = json.dumps({"template": template or {}, "replicas": replicas},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


class SpecHashes:
    """``spec_hash`` per workload, so that a reconcile does not serialize and hash
    the whole template again (about 9 µs for the benchmark's template, once in every
    reconcile and once more in every child built).

    Guarantees:

    - **The same hash** as the template and replica count hashed afresh.
    - **A new spec, a new hash.** An entry is the workload's UID, the template
      *object* it was computed from and the replica count; it answers only for that
      very template object and an equal count. ``WorkloadModels`` keeps a spec model
      (and its template) across versions only while the generation and the spec are
      the same; any other spec is validated again into a new template object, so
      an edit is hashed afresh. Models are read-only (their template is never
      changed in place: ``pod_template`` copies it). A UID-less workload (not from
      the API) is hashed afresh every time.
    - **Small.** One entry per UID, at most ``size``, all dropped when full (like the
      string pool of ``runtime/store.py``): a workload's next reconcile hashes once
      more. An entry holds its template alive, so the identity it compares is never
      another object's; the template is the model's own while the workload lives.
    - **Thread-safe** through single dict operations (several workers at once); two
      workers hashing the same spec both get the same answer.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        #: uid -> (template, replicas, hash)
        self._entries: dict[str, tuple[Any, int, str]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def of(self, w: GPUWorkload) -> str:
        template, replicas, uid = w.spec.template, w.spec.replicas, w.metadata.uid
        if not uid:
            return _digest(template, replicas)
        e = self._entries.get(uid)
        if e is not None and e[0] is template and e[1] == replicas:
            return e[2]
        h = _digest(template, replicas)
        if len(self._entries) >= self.size:
            self._entries.clear()
        self._entries[uid] = (template, replicas, h)
        return h


_HASHES = SpecHashes()


def child_name(workload: str, index: int) -> str:
    return f"{workload}-{index}"


def owner_reference(raw: Mapping[str, Any]) -> dict[str, Any]:
    meta = raw["metadata"]
    return {"apiVersion": API_VERSION, "kind": "GPUWorkload", "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def device_env(exposure: DeviceExposure, devices: list[int],
               uuids: list[str] | None) -> list[dict[str, str]]:
    """The variables that show a container its devices (docs/architecture.md, "How a
    replica sees its devices")."""
    return [{"name": k, "value": v} for k, v in exp.device_env(exposure, devices, uuids).items()]


def _gang_env(w: GPUWorkload, index: int) -> list[dict[str, str]]:
    name, ns = w.metadata.name, w.metadata.namespace or "default"
    return [
        {"name": "WORLD_SIZE", "value": str(w.spec.replicas)},
        {"name": "RANK", "value": str(index)},
        {"name": "MASTER_ADDR", "value": f"{child_name(name, 0)}.{name}.{ns}.svc"},
        {"name": "MASTER_PORT", "value": MASTER_PORT},
    ]


def _merge_env(existing: list[dict[str, Any]], ours: list[dict[str, str]]) -> list[dict[str, Any]]:
    names = {e["name"] for e in ours}
    return [e for e in existing if e.get("name") not in names] + ours


def pod_template(w: GPUWorkload, raw: Mapping[str, Any], p: Placement,
                 exposure: DeviceExposure, uuids: UuidLookup,
                 attempt: int = 0) -> dict[str, Any]:
    """The pod template of replica ``p``: the user's template, bound and injected.
    Every container and init container gets the exposure's environment, over what
    the template or the image sets."""
    tpl = copy.deepcopy(w.spec.template or {})
    meta = tpl.setdefault("metadata", {})
    spec = tpl.setdefault("spec", {})
    if not spec.get("containers"):
        spec["containers"] = [{"name": "main", "image": DEFAULT_IMAGE}]
    labels = meta.setdefault("labels", {})
    labels.update({WORKLOAD_LABEL: w.metadata.name, INDEX_LABEL: str(p.index),
                   WORKLOAD_UID_LABEL: str(raw["metadata"]["uid"]), ATTEMPT_LABEL: str(attempt)})
    ann = meta.setdefault("annotations", {})
    ann.update({
        NODE_ANNOTATION: p.node,
        DEVICES_ANNOTATION: ",".join(str(d) for d in p.devices),
        EXPOSURE_ANNOTATION: exposure.value,
        SPEC_HASH_ANNOTATION: spec_hash(w),
    })
    spec["nodeName"] = p.node
    spec.pop("schedulerName", None)
    spec.setdefault("restartPolicy", "Never")  # our retryPolicy replaces restarts
    if w.spec.priority_class_name:
        # the pod's priority comes from the class (the API server refuses both)
        spec["priorityClassName"] = w.spec.priority_class_name
        spec.pop("priority", None)
    env = device_env(exposure, p.devices, uuids(p.node, p.devices) if p.devices else None)
    env = _merge_env(env, [{"name": k, "value": v} for k, v in exp.portion_env(
        exposure, p.mig, p.share, is_mps(w.spec)).items()])
    if p.share:
        ann[SHARE_ANNOTATION] = p.share
    if p.mig:
        ann[MIG_ANNOTATION] = p.mig
    if w.spec.replicas > 1:
        env += _gang_env(w, p.index)
        spec["hostname"] = child_name(w.metadata.name, p.index)
        spec["subdomain"] = w.metadata.name
    gpus = w.spec.gpus
    for c in spec.get("initContainers") or ():
        c["env"] = _merge_env(c.get("env") or [], env)
    for c in spec["containers"]:
        c["env"] = _merge_env(c.get("env") or [], env)
        if exposure is DeviceExposure.DEVICE_PLUGIN:
            res = c.setdefault("resources", {})
            res.setdefault("limits", {})[GPU_RESOURCE] = str(gpus)
            gpus = 0  # the pod's GPUs go to its first container
    return tpl


def build_child(w: GPUWorkload, raw: Mapping[str, Any], p: Placement,
                exposure: DeviceExposure, uuids: UuidLookup, attempt: int = 0) -> dict[str, Any]:
    """A Pod, or a Job with one pod, for replica ``p`` of attempt ``attempt``."""
    tpl = pod_template(w, raw, p, exposure, uuids, attempt)
    meta = {
        "name": child_name(w.metadata.name, p.index),
        "namespace": w.metadata.namespace,
        "labels": dict(tpl["metadata"]["labels"]),
        "annotations": dict(tpl["metadata"]["annotations"]),
        "ownerReferences": [owner_reference(raw)],
    }
    if w.spec.workload_kind is WorkloadKind.JOB:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1,
                         "template": tpl}}
    meta["labels"].update(tpl["metadata"].get("labels") or {})
    meta["annotations"].update(tpl["metadata"].get("annotations") or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tpl["spec"]}


def build_service(w: GPUWorkload, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The headless Service that gives a gang's replicas stable DNS names."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": w.metadata.name, "namespace": w.metadata.namespace,
                     "labels": {WORKLOAD_LABEL: w.metadata.name},
                     "ownerReferences": [owner_reference(raw)]},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {WORKLOAD_LABEL: w.metadata.name},
                 "ports": [{"name": "master", "port": int(MASTER_PORT)}]},
    }
