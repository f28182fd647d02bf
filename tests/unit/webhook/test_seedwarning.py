"""A seed map on a StatefulSet's own metadata, where no pod sees it: the webhook
answers the StatefulSet's CREATE or UPDATE with a warning naming the template."""

from __future__ import annotations

from typing import Any

import pytest

from internal.webhook.admission import mutate_review

SEED = "0=node1:0,1\n1=node2:2"


def sts(own: bool, template: bool) -> dict[str, Any]:
    ann = {"gpu-scheduling-map": SEED}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "check", "namespace": "ml",
                         **({"annotations": ann} if own else {})},
            "spec": {"replicas": 2, "template": {
                "metadata": {"labels": {"app": "check"},
                             **({"annotations": ann} if template else {})},
                "spec": {"schedulerName": "gpu-scheduler",
                         "containers": [{"name": "c", "image": "busybox"}]}}}}


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return mutate_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                          "request": {"uid": "u1", "operation": operation, "name": "check",
                                      "namespace": "ml",
                                      "kind": {"group": "apps", "version": "v1",
                                               "kind": "StatefulSet"},
                                      "resource": {"group": "apps", "version": "v1",
                                                   "resource": "statefulsets"},
                                      "object": obj}})["response"]


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_map_on_the_statefulsets_own_metadata_is_admitted_with_a_warning(
        operation: str) -> None:
    out = review(sts(own=True, template=False), operation)
    assert out["allowed"] is True and "patch" not in out
    (warning,) = out["warnings"]
    assert "StatefulSet check" in warning
    assert "spec.template.metadata.annotations" in warning
    assert "default strategy, without CUDA_VISIBLE_DEVICES" in warning


@pytest.mark.parametrize(("own", "template"), [(True, True), (False, True), (False, False)])
def test_a_map_on_the_template_or_none_at_all_says_nothing(own: bool, template: bool) -> None:
    out = review(sts(own=own, template=template))
    assert out == {"uid": "u1", "allowed": True}
