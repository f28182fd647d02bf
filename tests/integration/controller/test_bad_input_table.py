"""Issue 23: every bad input is refused at the door, in words. One row per input:
the object, and the message the user sees (kubectl prints the API server's error).
None is accepted, none answers 500, none leaves anything behind."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import ApiError, Client, NotFound
from tests.integration.controller.conftest import Running, wait_condition

LONG = "w" * 62  # with "-0", 64 characters


def _c(name: str = "main", image: str = "x") -> dict[str, Any]:
    return {"name": name, "image": image}


def _tpl(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": list(containers) or [_c()], **spec}}


# (row id, metadata.name, spec, the message the user sees)
WORKLOADS: list[tuple[str, str, dict[str, Any], str]] = [
    # numbers
    ("backoff-2^40", "w", {"retryPolicy": {"backoffSeconds": 1099511627776}},
     "spec.retryPolicy.backoffSeconds: Invalid value: 1099511627776: spec.retryPolicy."
     "backoffSeconds in body should be less than or equal to 86400"),
    ("max-backoff", "w", {"retryPolicy": {"maxBackoffSeconds": 10**12}},
     "maxBackoffSeconds in body should be less than or equal to 86400"),
    ("max-retries", "w", {"retryPolicy": {"maxRetries": 10**6}},
     "maxRetries in body should be less than or equal to 1000"),
    ("backoff-zero", "w", {"retryPolicy": {"backoffSeconds": 0}},
     "backoffSeconds in body should be greater than or equal to 1"),
    ("backoff-order", "w", {"retryPolicy": {"backoffSeconds": 60, "maxBackoffSeconds": 10}},
     "maxBackoffSeconds must be >= backoffSeconds"),
    ("replicas-0", "w", {"replicas": 0}, "spec.replicas in body should be greater than or "
                                         "equal to 1"),
    ("replicas-huge", "w", {"replicas": 100000},
     "spec.replicas in body should be less than or equal to 512"),
    ("gpus-65", "w", {"gpusPerReplica": 65},
     "spec.gpusPerReplica in body should be less than or equal to 64"),
    ("gpus-disagree", "w", {"gpusPerReplica": 2, "gpuCount": 3},
     "gpuCount and gpusPerReplica must be equal"),
    ("memory-2^40", "w", {"minGPUMemoryMiB": 2**40},
     "minGPUMemoryMiB in body should be less than or equal to 16777216"),
    ("priority-huge", "w", {"priority": 10**12},
     "priority must be an integer in [0, 1000000000] or one of low, medium, high, got "
     "1000000000000"),
    ("priority-negative", "w", {"priority": -1}, "got -1"),
    ("priority-word", "w", {"priority": "urgent"}, 'got "urgent"'),
    # enums and strings
    ("strategy", "w", {"schedulingStrategy": "fastest"}, "spec.schedulingStrategy: Unsupported "
                                                         "value: \"fastest\""),
    ("topology", "w", {"topology": "Sometimes"}, "spec.topology: Unsupported value"),
    ("kind", "w", {"workloadKind": "Deployment"}, "spec.workloadKind: Unsupported value"),
    ("exposure", "w", {"deviceExposure": "magic"}, "spec.deviceExposure: Unsupported value"),
    ("model-name", "w", {"modelName": "m" * 254}, "spec.modelName: Too long"),
    ("class-name", "w", {"priorityClassName": "Team_High"}, "spec.priorityClassName in body "
                                                            "should match"),
    # the map
    ("map-no-map", "w", {"schedulingStrategy": "annotationMap"},
     "schedulingStrategy annotationMap needs spec.schedulingMap or the gpu-scheduling-map "
     "annotation"),
    ("map-other-strategy", "w", {"schedulingMap": "0=node1:0"},
     "schedulingMap is read only with schedulingStrategy annotationMap, not the default: set "
     "schedulingStrategy: annotationMap, or remove schedulingMap"),
    ("map-index-beyond", "w", {"replicas": 2, "schedulingStrategy": "annotationMap",
                               "schedulingMap": "0=node1:0\n1=node1:1\n2=node1:2"},
     "every index in schedulingMap must be < replicas"),
    ("map-index-superscript", "w", {"schedulingStrategy": "annotationMap",
                                    "schedulingMap": "\u00b2=node1:0"},
     "schedulingMap must be lines of '<index>=<node>:<dev>,<dev>'"),
    ("map-index-20-digits", "w", {"schedulingStrategy": "annotationMap",
                                  "schedulingMap": "99999999999999999999=node1:0"},
     "every index in schedulingMap must be < replicas"),
    ("map-syntax", "w", {"schedulingStrategy": "annotationMap", "schedulingMap": "0=node1"},
     "schedulingMap must be lines of '<index>=<node>:<dev>,<dev>'"),
    # names its children carry
    ("name-too-long", LONG, {},
     f"metadata.name is too long: its children are named <name>-<index> ({LONG}-0 here), at "
     "most 63 characters, so the name may have at most 61 (it has 62)"),
    ("gang-name-too-long", "g" * 61, {"replicas": 100},
     "so the name may have at most 60 (it has 61)"),
    ("gang-name-digit", "7b-finetune", {"replicas": 2},
     "metadata.name 7b-finetune cannot name a gang: its replicas find each other through a "
     "headless Service of the same name, which must be a DNS-1035 label"),
    # the template, as the API server would check the child
    ("container-upper", "w", {"template": _tpl(_c("UPPER"))},
     "spec.template.spec.containers: every name must be a DNS-1123 label (lowercase letters, "
     "digits and -, at most 63 characters), not \"UPPER\""),
    ("container-unnamed", "w", {"template": {"spec": {"containers": [{"image": "x"}]}}},
     "not (none)"),
    ("init-container-name", "w", {"template": _tpl(_c(), initContainers=[_c("init_1")])},
     "spec.template.spec.initContainers: every name must be a DNS-1123 label"),
    ("image-empty", "w", {"template": _tpl(_c(image=""))},
     "spec.template.spec.containers: every container needs an image; \"main\" has none"),
    ("image-missing", "w", {"template": {"spec": {"containers": [{"name": "main"}]}}},
     "every container needs an image"),
    ("job-restart-always", "w", {"workloadKind": "Job",
                                 "template": _tpl(restartPolicy="Always")},
     "workloadKind Job: spec.template.spec.restartPolicy must be Never or OnFailure"),
    ("template-gpu-request", "w", {"template": _tpl({
        "name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}})},
     "the device plugin would hand the pod GPUs the controller never booked"),
]


@pytest.mark.parametrize("name, spec, message",
                         [pytest.param(n, s, m, id=i) for i, n, s, m in WORKLOADS])
def test_a_bad_workload_is_refused_in_words(
        installed: ControlPlane, admin: Client, namespace: str, name: str,
        spec: dict[str, Any], message: str) -> None:
    obj = {"apiVersion": API_VERSION, "kind": "GPUWorkload",
           "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    with pytest.raises(ApiError) as err:
        admin.create(obj)
    assert err.value.status in (400, 403, 422), err.value  # never a 500
    assert message in str(err.value)
    assert "type conversion error" not in str(err.value)
    with pytest.raises(NotFound):  # nothing left behind
        admin.get(API_VERSION, "GPUWorkload", name, namespace)


def test_the_table_covers_the_issue() -> None:
    assert len(WORKLOADS) >= 25


@pytest.mark.parametrize("count, devices, healthy, message", [
    (4, 2, 2, "deviceCount must equal the number of devices listed in devices (or be 0)"),
    (1, 2, 2, "deviceCount must equal the number of devices listed"),
    (2, 2, 3, "healthyCount cannot exceed the number of devices listed"),
])
def test_a_gpunode_that_contradicts_itself_is_refused(
        admin: Client, count: int, devices: int, healthy: int, message: str) -> None:
    name = f"bad-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": API_VERSION, "kind": "GPUNode", "metadata": {"name": name},
                  "spec": {"nodeName": name}})
    try:
        with pytest.raises(ApiError, match=re.escape(message)) as err:
            admin.patch(API_VERSION, "GPUNode", name, {"status": {
                "deviceCount": count, "healthyCount": healthy,
                "devices": [{"index": i, "uuid": f"GPU-{i}"} for i in range(devices)]}},
                subresource="status")
        assert err.value.status == 422
    finally:
        admin.delete(API_VERSION, "GPUNode", name)


def test_a_template_too_large_for_its_children_is_reported_not_retried(
        controller: Running, admin: Client, namespace: str) -> None:
    """No CEL measures an object: the API server stores 1.1 MB, the controller says
    why it will never make a child of it (and spends no retry)."""
    big = _tpl({"name": "main", "image": "x", "command": ["x" * (1100 << 10)]})
    admin.create({"apiVersion": API_VERSION, "kind": "GPUWorkload",
                  "metadata": {"name": "big", "namespace": namespace},
                  "spec": {"template": big}})
    cond = wait_condition(admin, namespace, "big", "Scheduled", "InvalidSpec")
    assert "a child is made from it only up to 1048576" in cond["message"]
    w = admin.get(API_VERSION, "GPUWorkload", "big", namespace)
    assert not w["status"].get("retries") and not admin.list(
        "v1", "Pod", namespace=namespace)["items"]


def test_kubectl_scale_cannot_make_a_gang_of_a_name_its_service_cannot_carry(
        installed: ControlPlane, admin: Client, namespace: str) -> None:
    """``7b-finetune`` is a fine name for one pod, not for a gang's Service."""
    admin.create({"apiVersion": API_VERSION, "kind": "GPUWorkload",
                  "metadata": {"name": "7b-finetune", "namespace": namespace}, "spec": {}})
    r = installed.kubectl("scale", "-n", namespace, "gw", "7b-finetune", "--replicas=2",
                          check=False)
    assert r.returncode != 0
    assert "metadata.name 7b-finetune cannot name a gang" in r.stderr
    assert admin.get(API_VERSION, "GPUWorkload", "7b-finetune", namespace)["spec"][
        "replicas"] == 1
    # the same through the object
    with pytest.raises(ApiError, match="cannot name a gang"):
        admin.patch(API_VERSION, "GPUWorkload", "7b-finetune", {"spec": {"replicas": 2}},
                    namespace=namespace)


@pytest.mark.parametrize("kind, template, message", [
    ("Pod", _tpl({"name": "main", "image": "x", "ports": [{"containerPort": 700000}]}),
     "containerPort: Invalid value: 700000"),
    ("Job", _tpl({"name": "main", "image": "x",
                  "volumeMounts": [{"name": "missing", "mountPath": "/data"}]}),
     "volumeMounts[0].name: Not found: \"missing\""),
])
def test_a_template_the_api_server_refuses_as_a_child_is_reported_not_retried(
        controller: Running, admin: Client, namespace: str, kind: str,
        template: dict[str, Any], message: str) -> None:
    """The rules no policy states: the child is created with dryRun=All before the
    first placement; the API server's own words come back as InvalidSpec."""
    admin.create({"apiVersion": API_VERSION, "kind": "GPUWorkload",
                  "metadata": {"name": "odd", "namespace": namespace},
                  "spec": {"workloadKind": kind, "template": template}})
    cond = wait_condition(admin, namespace, "odd", "Scheduled", "InvalidSpec")
    assert "the API server refuses its children" in cond["message"]
    assert message in cond["message"]
    w = admin.get(API_VERSION, "GPUWorkload", "odd", namespace)
    assert not w["status"].get("retries") and not w["status"].get("placements")
    assert not admin.list("v1", "Pod", namespace=namespace)["items"]
