"""``/route``: a GPU pod of a labelled namespace goes to gpu-scheduler, and every
gpu-scheduler pod tolerates the taint that keeps other schedulers off named nodes."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from internal.webhook.admission import BadReview
from internal.webhook.routing import route_review

TOLERATION = {"key": "gpu.orchestrator.dev/device-authority", "operator": "Equal",
              "value": "named", "effect": "NoSchedule"}


def review(spec: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": operation,
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "object": {"metadata": {"name": "p"}, "spec": spec}}}


def gpu_spec(**extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            **extra}


def patch(answer: dict[str, Any]) -> list[dict[str, Any]]:
    raw = answer["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else []


def test_a_plain_gpu_pod_goes_to_gpu_scheduler_with_the_toleration() -> None:
    answer = route_review(review(gpu_spec()))
    assert answer["response"]["allowed"]
    assert patch(answer) == [
        {"op": "add", "path": "/spec/schedulerName", "value": "gpu-scheduler"},
        {"op": "add", "path": "/spec/tolerations", "value": [TOLERATION]}]


def test_a_gpu_scheduler_pod_gets_the_toleration_once() -> None:
    other = {"key": "x", "operator": "Exists"}
    answer = route_review(review({"schedulerName": "gpu-scheduler", "containers": [{}],
                                  "tolerations": [other]}))
    assert patch(answer) == [{"op": "add", "path": "/spec/tolerations/-", "value": TOLERATION}]
    again = route_review(review({"schedulerName": "gpu-scheduler", "containers": [{}],
                                 "tolerations": [other, TOLERATION]}))
    assert patch(again) == []


@pytest.mark.parametrize("spec", [
    {"containers": [{}]},  # asks for no GPU
    gpu_spec(nodeName="node1"),  # bound by its author
])
def test_what_is_not_routed_is_unchanged(spec: dict[str, Any]) -> None:
    answer = route_review(review(spec))
    assert answer["response"]["allowed"] and patch(answer) == []
    assert "warnings" not in answer["response"]


def test_another_scheduler_is_left_alone_with_a_warning() -> None:
    answer = route_review(review(gpu_spec(schedulerName="volcano")))
    assert patch(answer) == []
    assert "not routed to gpu-scheduler" in answer["response"]["warnings"][0]


def test_updates_and_bad_reviews() -> None:
    assert patch(route_review(review(gpu_spec(), operation="UPDATE"))) == []
    with pytest.raises(BadReview):
        route_review({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                      "request": {"operation": "CREATE"}})
