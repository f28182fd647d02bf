"""``POST /route``: GPU pods to gpu-scheduler, and gpu-scheduler's pods past the taint
of named nodes (docs/install.md, one authority per node). Pure.

kube-scheduler places any pod that asks for ``nvidia.com/gpu``, and the kubelet's
device plugin then picks its devices: beside the ledger's named devices, a second
authority that can hand out a GPU twice. Two hooks of the webhook configuration send
pods here:

- ``gpu-route``: pod CREATEs in a namespace labelled
  ``gpu.orchestrator.dev/scheduler=gpu-scheduler`` that ask for ``nvidia.com/gpu``
  (an opt-in, as Volcano's and KAI's users label theirs);
- ``gpu-toleration``: pod CREATEs that name ``schedulerName: gpu-scheduler``.

| the pod                                        | answer                             |
|------------------------------------------------|------------------------------------|
| not a pod CREATE, or sets ``spec.nodeName``    | allowed, unchanged                 |
| default scheduler, asks for ``nvidia.com/gpu`` | gpu-scheduler, and the toleration  |
| ``schedulerName: gpu-scheduler``               | the toleration (once)              |
| another scheduler                              | allowed, unchanged, with a warning |

The toleration is of the ``gpu.orchestrator.dev/device-authority=named:NoSchedule``
taint (``authority.OUR_TAINT``): gpu-scheduler binds through the Binding subresource
and its filters take that taint as its own, so the toleration says, on the pod, that
it may stand on a named node; other schedulers keep off.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import orjson

from internal.scheduling.authority import OUR_TAINT
from internal.scheduling.pods import pod_gpu_request
from internal.scheduling.taints import tolerates
from internal.webhook.admission import (
    API_VERSION,
    DEFAULT_SCHEDULER_NAME,
    deny,
    misshapen,
    review_request,
)

ROUTE_PATH = "/route"
DEFAULT_SCHEDULER = "default-scheduler"


def route_review(body: Mapping[str, Any],
                 scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> dict[str, Any]:
    """The AdmissionReview answering ``body`` sent to ``/route``; raises BadReview for
    a malformed body."""
    req, uid = review_request(body)
    resource = req.get("resource")
    if (req.get("operation") != "CREATE" or not isinstance(resource, Mapping)
            or resource.get("resource") != "pods" or req.get("subResource")):
        return _answer(uid, [], [])
    pod = req.get("object") or {}
    why = misshapen(pod)
    if why is not None:
        return deny(uid, f"not a pod this webhook can read: {why}")
    ops, warnings = route_patch(pod, scheduler_name)
    return _answer(uid, ops, warnings)


def route_patch(pod: Mapping[str, Any],
                scheduler_name: str = DEFAULT_SCHEDULER_NAME) -> tuple[list[dict], list[str]]:
    """The JSONPatch operations and warnings for one pod (see the module's table)."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return [], []
    ops: list[dict[str, Any]] = []
    name = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if name == DEFAULT_SCHEDULER and pod_gpu_request(pod) > 0:
        ops.append({"op": "add", "path": "/spec/schedulerName", "value": scheduler_name})
        name = scheduler_name
    if name != scheduler_name:
        if pod_gpu_request(pod) > 0:
            return [], [f"the pod names schedulerName {name!r}: not routed to "
                        f"{scheduler_name}; it may not go on a named GPU node"]
        return [], []
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        ops.append({"op": "add", "path": "/spec/tolerations", "value": [_toleration()]})
    elif not tolerates([t for t in tolerations if isinstance(t, Mapping)], OUR_TAINT):
        ops.append({"op": "add", "path": "/spec/tolerations/-", "value": _toleration()})
    return ops, []


def _toleration() -> dict[str, str]:
    return {"key": OUR_TAINT["key"], "operator": "Equal", "value": OUR_TAINT["value"],
            "effect": OUR_TAINT["effect"]}


def _answer(uid: str, ops: list[dict[str, Any]], warnings: list[str]) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(ops)).decode()
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
