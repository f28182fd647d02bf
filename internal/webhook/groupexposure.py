"""Exact devices for another controller's pods: a pod group's member (a JobSet's, a
LeaderWorkerSet group's, pods labelled as one group: docs/podgroups.md) gets
``CUDA_VISIBLE_DEVICES`` as a reference to the devices annotation. Pure.

A pod's env cannot change after it is created, and a group member's devices are
known only when its group is placed, long after. So the variable is a downward-API
reference, ``valueFrom.fieldRef.fieldPath:
metadata.annotations['gpu.orchestrator.dev/devices']``: the pod binding writes that
annotation in the Binding that binds the member, and the kubelet resolves the
reference when it starts the container, after the binding. The ``pod-devices``
admission policy admits exactly this reference and nothing a tenant could point
elsewhere (api/v1alpha1/pod_devices.py).

| the pod (a CREATE sent to ``/mutate``; with a map too)  | answer                     |
|---------------------------------------------------------|----------------------------|
| another scheduler's, or it sets ``spec.nodeName``         | allowed, unchanged         |
| it says it is in no group                                | allowed, unchanged         |
| it says it is in a group (``pod_group`` answers a group  | each GPU container (those  |
| or a refusal: the manager then places none of it)        | asking ``nvidia.com/gpu``, |
|                                                          | else every one) gets the   |
|                                                          | reference; a value of the  |
|                                                          | tenant's is replaced, with |
|                                                          | a warning                  |

The webhook reads no owner (it runs without API access): a JobSet's member is known
by its labels (its size is the manager's to read); an Indexed Job's pods carry no
sign of being a gang, so they get no reference unless labelled as a group.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from api.v1alpha1.keys import DEVICES_ANNOTATION, DEVICES_FIELD_PATH, GPU_RESOURCE
from internal.scheduling.exposure import CUDA_VISIBLE_DEVICES
from internal.scheduling.podgroups import pod_group

CONTAINER_LISTS = ("initContainers", "containers")


def devices_reference() -> dict[str, Any]:
    """The env entry: ``CUDA_VISIBLE_DEVICES`` from the devices annotation."""
    return {"name": CUDA_VISIBLE_DEVICES,
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": DEVICES_FIELD_PATH}}}


def _asks_gpus(c: Mapping[str, Any]) -> bool:
    r = c.get("resources") or {}
    return any(GPU_RESOURCE in (r.get(p) or {}) for p in ("limits", "requests"))


def _targets(spec: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    every = [(kind, i, c) for kind in CONTAINER_LISTS
             for i, c in enumerate(spec.get(kind) or []) if isinstance(c, Mapping)]
    gpu = [t for t in every if _asks_gpus(t[2])]
    return gpu or every


def _with_reference(env: Sequence[Any], where: str, warnings: list[str]) -> list[Any]:
    """``env`` with one ``CUDA_VISIBLE_DEVICES``: the reference, where it was first."""
    out: list[Any] = []
    placed = False
    for entry in env:
        if not isinstance(entry, Mapping) or entry.get("name") != CUDA_VISIBLE_DEVICES:
            out.append(entry)
            continue
        if placed:
            continue  # a second one: the first wins in the kubelet, ours must
        placed = True
        if _same_reference(entry):
            out.append(entry)
            continue
        old = entry.get("value") if "valueFrom" not in entry else "<valueFrom>"
        warnings.append(f"{where}: replaced {CUDA_VISIBLE_DEVICES}={old} with a reference "
                        f"to the annotation {DEVICES_ANNOTATION}")
        out.append(devices_reference())
    if not placed:
        out.append(devices_reference())
    return out


def _same_reference(entry: Mapping[str, Any]) -> bool:
    ref = (entry.get("valueFrom") or {}).get("fieldRef") or {}
    return ("value" not in entry and set(entry.get("valueFrom") or {}) == {"fieldRef"}
            and ref.get("fieldPath") == DEVICES_FIELD_PATH
            and ref.get("apiVersion", "v1") == "v1")


def in_group(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """Is ``pod`` a group member ``scheduler_name`` binds (the table above)?"""
    spec = pod.get("spec") or {}
    return not spec.get("nodeName") and spec.get("schedulerName") == scheduler_name \
        and pod_group(pod, None) is not None


def group_patch(pod: Mapping[str, Any], scheduler_name: str
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSONPatch operations and warnings giving a group member ``pod`` the
    reference (none for a pod in no group, or one ``scheduler_name`` does not bind).
    Idempotent: an admitted pod admitted again yields no operation."""
    if not in_group(pod, scheduler_name):
        return [], []
    spec = pod.get("spec") or {}
    ops: list[dict[str, Any]] = []
    warnings: list[str] = []
    for kind, i, c in _targets(spec):
        env = c.get("env")
        env = env if isinstance(env, list) else []
        merged = _with_reference(env, f"container {c.get('name', i)!r}", warnings)
        if merged != env:
            ops.append({"op": "replace" if "env" in c else "add",
                        "path": f"/spec/{kind}/{i}/env", "value": merged})
    return ops, warnings


def group_response(pod: Mapping[str, Any], scheduler_name: str) -> dict[str, Any]:
    """The AdmissionResponse (without its uid) for a pod CREATE: without a map, or a
    group member's with one (its group is placed by the map, docs/podgroups.md)."""
    ops, warnings = group_patch(pod, scheduler_name)
    response: dict[str, Any] = {"allowed": True}
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(ops)).decode()
    if warnings:
        response["warnings"] = warnings
    return response
