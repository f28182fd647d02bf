"""A seed map no pod sees: the ``gpu-scheduling-map`` annotation on a StatefulSet's
own metadata instead of its pod template's. Pure.

The StatefulSet controller copies ``spec.template.metadata`` onto each pod, never
the StatefulSet's own annotations, so such pods carry no map: the pod-binding
controller places them by the default strategy, and the webhook injects no
``CUDA_VISIBLE_DEVICES`` (it reads the pod's annotation). Two places say so:

| where                                      | what                                      |
|--------------------------------------------|-------------------------------------------|
| the webhook, StatefulSet CREATE or UPDATE  | allowed, unchanged, with the warning      |
| the pod-binding controller, first pod seen | a ``MapNotOnTemplate`` Warning Event on   |
|                                            | the StatefulSet, once per StatefulSet UID |

A StatefulSet whose template carries the map too, or that carries none, says nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.v1alpha1.keys import SCHEDULING_MAP_ANNOTATION

MAP_NOT_ON_TEMPLATE = "MapNotOnTemplate"


def _annotations(meta: Any) -> Mapping[str, Any]:
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    return ann if isinstance(ann, Mapping) else {}


def misplaced_map(sts: Mapping[str, Any]) -> str | None:
    """The warning for StatefulSet ``sts`` when its own metadata carries the map and
    its pod template does not; None otherwise."""
    meta = sts.get("metadata")
    if SCHEDULING_MAP_ANNOTATION not in _annotations(meta):
        return None
    spec = sts.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    tmeta = template.get("metadata") if isinstance(template, Mapping) else None
    if SCHEDULING_MAP_ANNOTATION in _annotations(tmeta):
        return None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return (f"StatefulSet {name or '<generated>'}: the {SCHEDULING_MAP_ANNOTATION} annotation "
            f"is on the StatefulSet's own metadata, which its pods never get; move it to "
            f"spec.template.metadata.annotations. Until then its pods are placed by the "
            f"default strategy, without CUDA_VISIBLE_DEVICES")


def statefulset_response(req: Mapping[str, Any]) -> dict[str, Any]:
    """The AdmissionResponse for a StatefulSet's CREATE or UPDATE: always allowed,
    with the warning of :func:`misplaced_map` when it applies."""
    out: dict[str, Any] = {"allowed": True}
    obj = req.get("object")
    why = misplaced_map(obj) if isinstance(obj, Mapping) else None
    if why is not None:
        out["warnings"] = [why]
    return out
