"""The JSONPatch (RFC 6902) that gives a pod its devices. Pure: a pod dict in,
operations and warnings out.

Idempotent by construction: each container's ``env`` is recomputed from what it
holds and replaced only when the result differs, so admitting an already mutated
pod again (webhook reinvocation, a pod re-created from ``kubectl get -o yaml``)
yields no operation and never a duplicate entry. A user's own value of a variable
we set is replaced, once, and reported as a warning.

Env goes into every container and init container (an init container that warms up
a model needs the same GPUs). In ``device-plugin`` mode the ``nvidia.com/gpu``
limit goes to the containers that already ask for GPUs, else to the first
container only: a limit in every container would take n GPUs per container.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.keys import DEVICES_ANNOTATION
from api.v1alpha1.types import DeviceExposure
from internal.webhook.exposure import GPU_RESOURCE, device_env, gpu_limit

CONTAINER_LISTS = ("initContainers", "containers")


@dataclass
class PodPatch:
    ops: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def escape(token: str) -> str:
    """A JSON Pointer (RFC 6901) reference token."""
    return token.replace("~", "~0").replace("/", "~1")


def _merged_env(
    env: Sequence[Mapping[str, Any]], desired: Mapping[str, str], where: str,
    warnings: list[str],
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for entry in env:
        name = entry.get("name")
        if name not in desired:
            out.append(dict(entry))
            continue
        if name in seen:  # a duplicate of a variable we own: drop it
            continue
        seen.add(name)
        want = {"name": name, "value": desired[name]}
        if dict(entry) != want:
            old = entry.get("value") if "valueFrom" not in entry else "<valueFrom>"
            warnings.append(f"{where}: replaced {name}={old} with {desired[name]}")
        out.append(want)
    out.extend({"name": n, "value": v} for n, v in desired.items() if n not in seen)
    return out


def _with_gpu_limit(resources: Mapping[str, Any], n: int, where: str,
                    warnings: list[str]) -> dict[str, Any]:
    res = copy.deepcopy(dict(resources))
    want = str(n)
    for part in ("limits", "requests"):
        values = res.get(part) or {}
        if part == "requests" and GPU_RESOURCE not in values:
            continue  # extended resources default their request to the limit
        old = values.get(GPU_RESOURCE)
        if old is not None and str(old) != want:
            warnings.append(f"{where}: replaced {part} {GPU_RESOURCE}={old} with {want}")
        res[part] = {**values, GPU_RESOURCE: want}
    return res


def build_patch(pod: Mapping[str, Any], devices: Sequence[int],
                mode: DeviceExposure) -> PodPatch:
    """Operations that show every container of ``pod`` the host ``devices``."""
    result = PodPatch()
    spec = pod.get("spec") or {}
    desired = device_env(mode, devices)
    if desired:
        for kind in CONTAINER_LISTS:
            for i, c in enumerate(spec.get(kind) or []):
                where = f"container {c.get('name', i)!r}"
                env = c.get("env") or []
                merged = _merged_env(env, desired, where, result.warnings)
                if merged != env:
                    op = "replace" if "env" in c else "add"
                    result.ops.append({"op": op, "path": f"/spec/{kind}/{i}/env",
                                       "value": merged})
    n = gpu_limit(mode, devices)
    if n is not None:
        containers = spec.get("containers") or []

        def asks(c: Mapping[str, Any]) -> bool:
            r = c.get("resources") or {}
            return any(GPU_RESOURCE in (r.get(p) or {}) for p in ("limits", "requests"))

        targets = [i for i, c in enumerate(containers) if asks(c)] or [0][: len(containers)]
        for i in targets:
            c = containers[i]
            where = f"container {c.get('name', i)!r}"
            old = c.get("resources") or {}
            new = _with_gpu_limit(old, n, where, result.warnings)
            if new != old:
                # "add" on an existing object member replaces it (RFC 6902 4.1).
                result.ops.append({"op": "add", "path": f"/spec/containers/{i}/resources",
                                   "value": new})
    value = ",".join(str(d) for d in devices)
    annotations = (pod.get("metadata") or {}).get("annotations")
    if annotations is None:
        result.ops.append({"op": "add", "path": "/metadata/annotations",
                           "value": {DEVICES_ANNOTATION: value}})
    elif annotations.get(DEVICES_ANNOTATION) != value:
        result.ops.append({"op": "add",
                           "path": f"/metadata/annotations/{escape(DEVICES_ANNOTATION)}",
                           "value": value})
    return result
