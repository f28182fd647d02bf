"""admission.k8s.io/v1 AdmissionReview in, AdmissionReview out, for pods. Pure.

- Not a pod CREATE: allowed, unchanged.
- No ``gpu-scheduling-map`` annotation: a pod group's member gets ``CUDA_VISIBLE_DEVICES``
  as a reference to its devices annotation, or in ``nvidia-visible-devices`` mode
  ``NVIDIA_VISIBLE_DEVICES`` as one to its device UUIDs annotation
  (:mod:`internal.webhook.groupexposure`); a member asking ``device-plugin``, ``dra``
  or an unknown mode in its own annotation is rejected; any other pod is allowed,
  unchanged.
- A pod group's member with a map: the same reference (its group is placed by the
  map, by each member's index in the group, which a pod cannot tell at admission:
  a JobSet's is its replicated jobs' sum); a malformed map is rejected.
- A pod that sets ``spec.nodeName`` itself, or names another ``schedulerName``:
  allowed, unchanged, with a warning. The pod-binding controller will not bind it, so
  devices injected from the map would be devices nobody booked.
- A malformed map, or an unknown per-pod exposure mode: rejected (``allowed:
  false``, HTTP-like code 400) with the parser's message naming the bad line.
- A pod-index label that is not an index (``²``, 70 digits): rejected, with why.
- A review without ``request.uid``: BadReview (the server answers HTTP 400).
- A pod CREATE whose object, metadata, annotations, labels or spec is not a JSON
  object (kube-apiserver never sends one): rejected, naming the field.
- A replica index that cannot be told, or that the map does not name: allowed,
  unchanged, with a warning (the pod-binding controller records the Event and
  leaves the pod Pending).
- Otherwise: allowed with the JSONPatch of :mod:`internal.webhook.patch`.
- A StatefulSet (CREATE or UPDATE): allowed, unchanged; with a warning when the map
  is on its own metadata and not its pod template's (:mod:`internal.webhook.seedwarning`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import orjson

from api.v1alpha1.keys import REQUESTED_EXPOSURE_ANNOTATION, SCHEDULING_MAP_ANNOTATION
from api.v1alpha1.types import DeviceExposure
from internal.scheduling.mapparser import MapParseError, parse_scheduling_map
from internal.scheduling.podindex import pod_index
from internal.webhook.exposure import parse_exposure
from internal.webhook.groupexposure import group_response, in_group
from internal.webhook.patch import build_patch
from internal.webhook.seedwarning import statefulset_response

API_VERSION = "admission.k8s.io/v1"


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer."""


def _review(uid: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview",
            "response": {"uid": uid, **response}}


def deny(uid: str, message: str) -> dict[str, Any]:
    return _review(uid, {"allowed": False,
                         "status": {"code": 400, "reason": "BadRequest", "message": message}})


DEFAULT_SCHEDULER_NAME = "gpu-scheduler"


def not_ours(pod: Mapping[str, Any], scheduler_name: str) -> str | None:
    """Why the pod-binding controller will never bind ``pod``, or None."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return f"the pod sets spec.nodeName {spec['nodeName']!r} itself"
    name = spec.get("schedulerName") or "default-scheduler"
    if name != scheduler_name:
        return f"the pod names schedulerName {name!r}, not {scheduler_name!r}"
    return None


#: the parts of a pod this webhook reads as objects, by their path in the review
_POD_OBJECTS = (("metadata",), ("metadata", "annotations"), ("metadata", "labels"),
                ("spec",))


def _kind_of(value: Any) -> str:
    return {str: "a string", list: "a list", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def misshapen(pod: Any) -> str | None:
    """Which field of the pod this webhook reads is not a JSON object, in words."""
    if not isinstance(pod, Mapping):
        return f"request.object is {_kind_of(pod)}, not an object"
    for path in _POD_OBJECTS:
        value: Any = pod
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
            if value is None:
                break
        if value is not None and not isinstance(value, Mapping):
            return f"request.object.{'.'.join(path)} is {_kind_of(value)}, not an object"
    return None



def review_request(body: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """(the request, its uid) of an AdmissionReview ``body``; raises BadReview when it
    is no AdmissionReview of our apiVersion with a request and a uid."""
    if body.get("kind") != "AdmissionReview" or not isinstance(body.get("request"), dict):
        raise BadReview("expected an AdmissionReview with a request")
    if body.get("apiVersion") != API_VERSION:
        raise BadReview(f"unsupported apiVersion {body.get('apiVersion')!r}; want {API_VERSION}")
    req = body["request"]
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("the AdmissionReview's request has no uid")
    return req, uid

def _group_review(uid: str, pod: Mapping[str, Any], scheduler_name: str,
                  default_exposure: DeviceExposure) -> dict[str, Any]:
    """The answer for a pod without a map, or a group member's with one."""
    try:
        return _review(uid, group_response(pod, scheduler_name, default_exposure))
    except ValueError as exc:  # a mode a group member cannot have
        return deny(uid, f"annotation {REQUESTED_EXPOSURE_ANNOTATION}: {exc}")


def mutate_review(body: Mapping[str, Any],
                  default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
                  scheduler_name: str = DEFAULT_SCHEDULER_NAME,
                  ) -> dict[str, Any]:
    """The AdmissionReview answering ``body``; raises BadReview for a malformed body."""
    req, uid = review_request(body)
    pod = req.get("object") or {}
    resource = req.get("resource")
    if (isinstance(resource, Mapping) and resource.get("resource") == "statefulsets"
            and not req.get("subResource")):
        return _review(uid, statefulset_response(req))  # a map where no pod sees it
    if (req.get("operation") != "CREATE" or not isinstance(resource, Mapping)
            or resource.get("resource") != "pods" or req.get("subResource")):
        return _review(uid, {"allowed": True})
    why = misshapen(pod)
    if why is not None:
        return deny(uid, f"not a pod this webhook can read: {why}")
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(SCHEDULING_MAP_ANNOTATION)
    if text is None:  # a pod group's member gets a reference to its devices
        return _group_review(uid, pod, scheduler_name, default_exposure)
    if in_group(pod, scheduler_name):  # its group placed by the map: the same reference
        try:
            parse_scheduling_map(str(text))
        except MapParseError as exc:
            return deny(uid, f"annotation {SCHEDULING_MAP_ANNOTATION}: {exc}")
        return _group_review(uid, pod, scheduler_name, default_exposure)
    why = not_ours(pod, scheduler_name)
    if why is not None:
        return _review(uid, {"allowed": True, "warnings": [
            f"{SCHEDULING_MAP_ANNOTATION}: {why}, so {scheduler_name} does not bind it; "
            "no devices injected"]})
    try:
        entries = parse_scheduling_map(str(text))
    except MapParseError as exc:
        return deny(uid, f"annotation {SCHEDULING_MAP_ANNOTATION}: {exc}")
    mode = default_exposure
    if REQUESTED_EXPOSURE_ANNOTATION in annotations:
        try:
            mode = parse_exposure(str(annotations[REQUESTED_EXPOSURE_ANNOTATION]))
        except ValueError as exc:
            return deny(uid, f"annotation {REQUESTED_EXPOSURE_ANNOTATION}: {exc}")
    index, source = pod_index(pod, str(req.get("name") or ""))
    if index is None and source.startswith("label "):
        return deny(uid, f"{SCHEDULING_MAP_ANNOTATION}: {source}")
    if index is None:
        return _review(uid, {"allowed": True, "warnings": [
            f"{SCHEDULING_MAP_ANNOTATION}: replica index unknown: {source}; "
            "no devices injected"]})
    entry = entries.get(index)
    if entry is None:
        known = ",".join(str(i) for i in entries)
        return _review(uid, {"allowed": True, "warnings": [
            f"{SCHEDULING_MAP_ANNOTATION}: no line for replica {index} ({source}); "
            f"the map names replicas {known}; no devices injected"]})
    patch = build_patch(pod, entry.devices, mode)
    response: dict[str, Any] = {"allowed": True}
    if patch.ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch.ops)).decode()
    if patch.warnings:
        response["warnings"] = patch.warnings
    return _review(uid, response)
