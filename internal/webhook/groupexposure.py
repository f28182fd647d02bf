"""Exact devices for another controller's pods: a pod group's member (a JobSet's, a
LeaderWorkerSet group's, pods labelled as one group: docs/podgroups.md) gets its
device variable as a reference to an annotation the binder writes. Pure.

A pod's env cannot change after it is created, and a group member's devices are
known only when its group is placed, long after. So the variable is a downward-API
reference (``valueFrom.fieldRef.fieldPath: metadata.annotations['...']``): the pod
binding writes that annotation in the Binding that binds the member, and the kubelet
resolves the reference when it starts the container, after the binding. The
``pod-devices`` admission policy admits exactly these references and nothing a
tenant could point elsewhere (api/v1alpha1/pod_devices.py).

The member's mode is its ``gpu.orchestrator.dev/device-exposure`` annotation, else
the webhook's ``--device-exposure``:

| mode                      | the GPU containers get                                      |
|---------------------------|-------------------------------------------------------------|
| ``cuda-visible-devices``  | ``CUDA_VISIBLE_DEVICES`` from ``gpu.orchestrator.dev/devices`` |
|                           | (host indices)                                              |
| ``nvidia-visible-devices``| ``NVIDIA_VISIBLE_DEVICES`` from                             |
|                           | ``gpu.orchestrator.dev/device-uuids`` (the devices' UUIDs), |
|                           | and no ``CUDA_VISIBLE_DEVICES``: the container runtime      |
|                           | shows exactly those GPUs, numbered from 0, which CUDA sees  |
|                           | all of; a host index there would name another GPU or none,  |
|                           | so a tenant's is removed, with a warning                    |
| ``device-plugin``, as the | refused: the kubelet's device plugin would pick its devices,|
| pod's own annotation      | not its group's placement, which holds others               |
| ``device-plugin``, as the | ``cuda-visible-devices``: a group is always placed on named |
| webhook's default         | devices, and a cluster default must not refuse every gang  |
| ``dra`` (own, or the pod  | nothing: the member names a ResourceClaim (a template's)    |
| names a claim, asks no    | whose devices the DRA driver shows it, numbered from 0; the |
| ``nvidia.com/gpu`` and no | binder allocates it to the member's planned devices.        |
| mode of its own)          | Refused without a claim, or with ``nvidia.com/gpu`` asked   |
| ``dra`` as the webhook's  | ``cuda-visible-devices``, as ``device-plugin`` above        |
| default, and no claim     |                                                             |
| ``cuda-visible-devices`` /| refused: the binder allocates only a ``dra`` member's claim,|
| ``nvidia-visible-devices``| so the kubelet would never start it                         |
| as the pod's own, and it  |                                                             |
| names a ResourceClaim     |                                                             |
| unknown                   | refused, as for a seed pod (``parse_exposure``)             |

| the pod (a CREATE sent to ``/mutate``; with a map too)  | answer                     |
|---------------------------------------------------------|----------------------------|
| another scheduler's, or it sets ``spec.nodeName``         | allowed, unchanged         |
| it says it is in no group                                | allowed, unchanged         |
| it says it is in a group (``pod_group`` answers a group  | each GPU container (those  |
| or a refusal: the manager then places none of it)        | asking ``nvidia.com/gpu``, |
|                                                          | else every one) gets the   |
|                                                          | mode's reference; a value  |
|                                                          | of the tenant's is         |
|                                                          | replaced, with a warning   |

The webhook reads no owner (it runs without API access): a JobSet's member is known
by its labels (its size is the manager's to read); an Indexed Job's pods carry no
sign of being a gang, so they get no reference unless labelled as a group.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from api.v1alpha1.keys import (
    DEVICE_UUIDS_ANNOTATION,
    DEVICE_UUIDS_FIELD_PATH,
    DEVICES_ANNOTATION,
    DEVICES_FIELD_PATH,
    GPU_RESOURCE,
    REQUESTED_EXPOSURE_ANNOTATION,
)
from api.v1alpha1.types import DeviceExposure
from internal.scheduling.exposure import CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES
from internal.scheduling.podgroups import pod_group
from internal.webhook.exposure import parse_exposure

CONTAINER_LISTS = ("initContainers", "containers")
#: each mode a member may have: the variable it gets, the annotation it reads, and
#: that annotation's downward-API path
REFERENCES = {
    DeviceExposure.CUDA_VISIBLE_DEVICES:
        (CUDA_VISIBLE_DEVICES, DEVICES_ANNOTATION, DEVICES_FIELD_PATH),
    DeviceExposure.NVIDIA_VISIBLE_DEVICES:
        (NVIDIA_VISIBLE_DEVICES, DEVICE_UUIDS_ANNOTATION, DEVICE_UUIDS_FIELD_PATH),
}


def devices_reference(mode: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES
                      ) -> dict[str, Any]:
    """The env entry of ``mode``: its variable from the annotation it reads."""
    name, _, path = REFERENCES[mode]
    return {"name": name,
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def uses_claims(pod: Mapping[str, Any]) -> bool:
    """Does ``pod`` name a ResourceClaim (``spec.resourceClaims``: a claim, or a
    template kube-controller-manager makes its claim from)?"""
    return any(isinstance(c, Mapping) and (c.get("resourceClaimName")
                                           or c.get("resourceClaimTemplateName"))
               for c in (pod.get("spec") or {}).get("resourceClaims") or ())


def asks_gpus(pod: Mapping[str, Any]) -> bool:
    """Does a container of ``pod`` request ``nvidia.com/gpu``?"""
    spec = pod.get("spec") or {}
    return any(_asks_gpus(c) for kind in CONTAINER_LISTS for c in spec.get(kind) or ()
               if isinstance(c, Mapping))


def member_mode(pod: Mapping[str, Any], default: DeviceExposure) -> DeviceExposure:
    """The mode of group member ``pod`` (the first table); ValueError, in words,
    for a mode it cannot have. A member that names a ResourceClaim, asks no
    ``nvidia.com/gpu`` and names no mode of its own is in ``dra`` mode (its devices
    come through its claim)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if REQUESTED_EXPOSURE_ANNOTATION not in annotations:
        if uses_claims(pod) and not asks_gpus(pod):
            return DeviceExposure.DRA
        return default if default in REFERENCES else DeviceExposure.CUDA_VISIBLE_DEVICES
    raw = str(annotations[REQUESTED_EXPOSURE_ANNOTATION])
    if raw.strip() == DeviceExposure.DRA.value:
        return _dra_member(pod)
    mode = parse_exposure(raw)
    if mode not in REFERENCES:
        raise ValueError(
            f"device exposure {mode.value!r} is not given to a pod group's member: the "
            "device plugin would pick its devices, not the ones its group is placed on "
            "(use cuda-visible-devices, nvidia-visible-devices or dra)")
    if uses_claims(pod):
        raise ValueError(
            f"device exposure {mode.value!r} for a pod group's member that names a "
            "ResourceClaim: its claim would not be allocated (only a 'dra' member's is), "
            "so the kubelet would never start it (use dra, or drop the claim)")
    return mode


def dra_member(pod: Mapping[str, Any]) -> bool:
    """Is group member ``pod`` in ``dra`` mode, as the webhook admitted it (it names a
    ResourceClaim, asks no ``nvidia.com/gpu``, and no other mode of its own)? The
    binder allocates its claim."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    own = str(annotations.get(REQUESTED_EXPOSURE_ANNOTATION, DeviceExposure.DRA.value))
    return uses_claims(pod) and not asks_gpus(pod) and own.strip() == DeviceExposure.DRA.value


def _dra_member(pod: Mapping[str, Any]) -> DeviceExposure:
    """``dra`` for a member whose claim is what shows it its devices; ValueError for
    one that names no claim, or asks ``nvidia.com/gpu`` beside it."""
    if not uses_claims(pod):
        raise ValueError(
            "device exposure 'dra' for a pod group's member needs its ResourceClaim: "
            "spec.resourceClaims names none (add one with a resourceClaimTemplateName "
            "whose template requests exactly N devices of the DRA device class, and "
            "list it in the GPU containers' resources.claims)")
    if asks_gpus(pod):
        raise ValueError(
            "device exposure 'dra' for a pod group's member that requests nvidia.com/gpu: "
            "the device plugin would hand it GPUs beside its claim's (ask for the GPUs "
            "in its ResourceClaim only)")
    return DeviceExposure.DRA


def reads_uuids(pod: Mapping[str, Any]) -> bool:
    """Does a container of ``pod`` read the device UUIDs annotation (the binder then
    writes it)?"""
    spec = pod.get("spec") or {}
    return any(_same_reference(e, DEVICE_UUIDS_FIELD_PATH)
               for kind in CONTAINER_LISTS for c in spec.get(kind) or ()
               if isinstance(c, Mapping) for e in c.get("env") or ()
               if isinstance(e, Mapping) and e.get("name") == NVIDIA_VISIBLE_DEVICES)


def _asks_gpus(c: Mapping[str, Any]) -> bool:
    r = c.get("resources") or {}
    return any(GPU_RESOURCE in (r.get(p) or {}) for p in ("limits", "requests"))


def _targets(spec: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    every = [(kind, i, c) for kind in CONTAINER_LISTS
             for i, c in enumerate(spec.get(kind) or []) if isinstance(c, Mapping)]
    gpu = [t for t in every if _asks_gpus(t[2])]
    return gpu or every


def _with_reference(env: Sequence[Any], where: str, mode: DeviceExposure,
                    warnings: list[str]) -> list[Any]:
    """``env`` with one of ``mode``'s variable: the reference, where it was first;
    in ``nvidia-visible-devices`` mode without ``CUDA_VISIBLE_DEVICES``."""
    name, annotation, path = REFERENCES[mode]
    drop = CUDA_VISIBLE_DEVICES if mode is DeviceExposure.NVIDIA_VISIBLE_DEVICES else None
    out: list[Any] = []
    placed = False
    for entry in env:
        if not isinstance(entry, Mapping) or entry.get("name") not in (name, drop):
            out.append(entry)
            continue
        old = entry.get("value") if "valueFrom" not in entry else "<valueFrom>"
        if entry.get("name") == drop:
            warnings.append(f"{where}: removed {drop}={old}: the container runtime shows "
                            f"exactly the devices of {name}, numbered from 0")
            continue
        if placed:
            continue  # a second one: the first wins in the kubelet, ours must
        placed = True
        if _same_reference(entry, path):
            out.append(entry)
            continue
        warnings.append(f"{where}: replaced {name}={old} with a reference "
                        f"to the annotation {annotation}")
        out.append(devices_reference(mode))
    if not placed:
        out.append(devices_reference(mode))
    return out


def _same_reference(entry: Mapping[str, Any], path: str) -> bool:
    ref = (entry.get("valueFrom") or {}).get("fieldRef") or {}
    return ("value" not in entry and set(entry.get("valueFrom") or {}) == {"fieldRef"}
            and ref.get("fieldPath") == path
            and ref.get("apiVersion", "v1") == "v1")


def in_group(pod: Mapping[str, Any], scheduler_name: str) -> bool:
    """Is ``pod`` a group member ``scheduler_name`` binds (the table above)?"""
    spec = pod.get("spec") or {}
    return not spec.get("nodeName") and spec.get("schedulerName") == scheduler_name \
        and pod_group(pod, None) is not None


def group_patch(pod: Mapping[str, Any], scheduler_name: str,
                default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
                ) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSONPatch operations and warnings giving a group member ``pod`` the
    reference of its mode (none for a pod in no group, or one ``scheduler_name`` does
    not bind); ValueError when its mode is refused (``member_mode``). Idempotent: an
    admitted pod admitted again yields no operation."""
    if not in_group(pod, scheduler_name):
        return [], []
    mode = member_mode(pod, default_exposure)
    if mode is DeviceExposure.DRA:
        return [], []  # the driver shows the container its claim's devices, from 0
    spec = pod.get("spec") or {}
    ops: list[dict[str, Any]] = []
    warnings: list[str] = []
    for kind, i, c in _targets(spec):
        env = c.get("env")
        env = env if isinstance(env, list) else []
        merged = _with_reference(env, f"container {c.get('name', i)!r}", mode, warnings)
        if merged != env:
            ops.append({"op": "replace" if "env" in c else "add",
                        "path": f"/spec/{kind}/{i}/env", "value": merged})
    return ops, warnings


def group_response(pod: Mapping[str, Any], scheduler_name: str,
                   default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
                   ) -> dict[str, Any]:
    """The AdmissionResponse (without its uid) for a pod CREATE: without a map, or a
    group member's with one (its group is placed by the map, docs/podgroups.md);
    ValueError when the member's mode is refused."""
    ops, warnings = group_patch(pod, scheduler_name, default_exposure)
    response: dict[str, Any] = {"allowed": True}
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(ops)).decode()
    if warnings:
        response["warnings"] = warnings
    return response
