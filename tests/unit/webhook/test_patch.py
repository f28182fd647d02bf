"""The JSONPatch builder and the AdmissionReview handler, without a server."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from api.v1alpha1.types import DeviceExposure
from internal.scheduling.podindex import pod_index
from internal.webhook.admission import mutate_review
from internal.webhook.patch import DEVICES_ANNOTATION, build_patch

SEED = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3"


def make_pod(name: str = "check-2", env: list[dict] | None = None, containers: int = 1,
             labels: dict | None = None, annotations: dict | None = None,
             **md: Any) -> dict:
    cs = []
    for i in range(containers):
        c: dict[str, Any] = {"name": f"c{i}", "image": "busybox"}
        if env is not None:
            c["env"] = copy.deepcopy(env)
        cs.append(c)
    meta = {"name": name, "annotations": {"gpu-scheduling-map": SEED, **(annotations or {})},
            **md}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": "gpu-scheduler", "containers": cs}}


def apply_patch(doc: dict, ops: list[dict]) -> dict:
    """A small RFC 6902 applier for add/replace (all the builder emits)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] in ("add", "replace"), op
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = doc
        for p in parts[:-1]:
            target = target[int(p)] if isinstance(target, list) else target[p]
        last = parts[-1]
        if isinstance(target, list):
            if last == "-":
                target.append(op["value"])
            else:
                target[int(last)] = op["value"]
        else:
            assert op["op"] == "add" or last in target
            target[last] = op["value"]
    return doc


def review(pod: dict, operation: str = "CREATE", namespace: str = "ns") -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": operation, "namespace": namespace,
                        "name": pod["metadata"].get("name", ""),
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "object": pod}}


def answer(pod: dict, **kw: Any) -> tuple[dict, dict]:
    """The response, and the pod with its patch applied."""
    resp = mutate_review(review(pod), **kw)["response"]
    ops = json.loads(base64.b64decode(resp["patch"])) if "patch" in resp else []
    return resp, apply_patch(pod, ops)


def env_of(pod: dict, i: int = 0) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][i].get("env", [])}


def test_every_container_gets_the_devices_of_its_replica() -> None:
    resp, pod = answer(make_pod("check-2", containers=2))
    assert resp["allowed"] and resp["uid"] == "u-1" and resp["patchType"] == "JSONPatch"
    assert env_of(pod, 0) == env_of(pod, 1) == {"NVIDIA_VISIBLE_DEVICES": "all",
                                                 "CUDA_VISIBLE_DEVICES": "0,1,2"}
    assert pod["metadata"]["annotations"][DEVICES_ANNOTATION] == "0,1,2"


def test_existing_env_is_kept_and_the_variable_appended() -> None:
    pod = make_pod("check-0", env=[{"name": "A", "value": "1"}])
    _, out = answer(pod)
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]


def test_readmission_changes_nothing() -> None:
    _, once = answer(make_pod("check-4"))
    resp, twice = answer(once)
    assert "patch" not in resp and "warnings" not in resp
    assert twice == once
    assert [e["name"] for e in twice["spec"]["containers"][0]["env"]] == [
        "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]


def test_a_user_value_is_replaced_once_with_a_warning() -> None:
    env = [{"name": "CUDA_VISIBLE_DEVICES", "value": "7"}, {"name": "X", "value": "x"},
           {"name": "CUDA_VISIBLE_DEVICES", "value": "8"}]
    resp, pod = answer(make_pod("check-1", env=env))
    assert pod["spec"]["containers"][0]["env"] == [
        {"name": "CUDA_VISIBLE_DEVICES", "value": "2"}, {"name": "X", "value": "x"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert any("replaced CUDA_VISIBLE_DEVICES=7 with 2" in w for w in resp["warnings"])


def test_init_containers_get_the_devices_too() -> None:
    pod = make_pod("check-3")
    pod["spec"]["initContainers"] = [{"name": "warmup", "image": "busybox"}]
    _, out = answer(pod)
    assert out["spec"]["initContainers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]


def test_nvidia_visible_devices_mode_renumbers() -> None:
    _, pod = answer(make_pod("check-2"), default_exposure=DeviceExposure.NVIDIA_VISIBLE_DEVICES)
    assert env_of(pod) == {"NVIDIA_VISIBLE_DEVICES": "0,1,2", "CUDA_VISIBLE_DEVICES": "0,1,2"}
    _, pod = answer(make_pod("check-3"), default_exposure=DeviceExposure.NVIDIA_VISIBLE_DEVICES)
    assert env_of(pod) == {"NVIDIA_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "0"}


def test_device_plugin_mode_requests_gpus_in_the_first_container_only() -> None:
    pod = make_pod("check-2", containers=2,
                   annotations={"gpu.orchestrator.dev/device-exposure": "device-plugin"})
    _, out = answer(pod)
    c0, c1 = out["spec"]["containers"]
    assert c0["resources"] == {"limits": {"nvidia.com/gpu": "3"}}
    assert "resources" not in c1 and "env" not in c0 and "env" not in c1
    assert "patch" not in mutate_review(review(out))["response"]


def test_device_plugin_mode_fixes_the_container_that_asks_for_gpus() -> None:
    pod = make_pod("check-0", containers=2)
    pod["spec"]["containers"][1]["resources"] = {
        "limits": {"nvidia.com/gpu": "4", "cpu": "1"}, "requests": {"nvidia.com/gpu": "4"}}
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    resp, out = answer(pod, default_exposure=DeviceExposure.DEVICE_PLUGIN)
    assert out["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1"}}
    assert out["spec"]["containers"][1]["resources"] == {
        "limits": {"nvidia.com/gpu": "2", "cpu": "1"}, "requests": {"nvidia.com/gpu": "2"}}
    assert len(resp["warnings"]) == 2


def test_build_patch_escapes_the_annotation_key() -> None:
    ops = build_patch(make_pod(), (1,), DeviceExposure.CUDA_VISIBLE_DEVICES).ops
    assert {"op": "add", "path": "/metadata/annotations/gpu.orchestrator.dev~1devices",
            "value": "1"} in ops


def test_a_malformed_map_is_rejected_naming_the_line() -> None:
    pod = make_pod(annotations={"gpu-scheduling-map": "0=node1:0\n1=node2\n"})
    resp = mutate_review(review(pod))["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 400
    assert "line 2" in resp["status"]["message"] and "1=node2" in resp["status"]["message"]


def test_an_unknown_exposure_annotation_is_rejected() -> None:
    pod = make_pod(annotations={"gpu.orchestrator.dev/device-exposure": "magic"})
    resp = mutate_review(review(pod))["response"]
    assert not resp["allowed"] and "magic" in resp["status"]["message"]


def test_an_index_missing_from_the_map_is_allowed_with_a_warning() -> None:
    resp = mutate_review(review(make_pod("check-9")))["response"]
    assert resp["allowed"] and "patch" not in resp
    assert "replica 9" in resp["warnings"][0]


def test_unannotated_pods_and_updates_pass_unchanged() -> None:
    pod = make_pod()
    del pod["metadata"]["annotations"]
    assert mutate_review(review(pod))["response"] == {"uid": "u-1", "allowed": True}
    assert mutate_review(review(make_pod(), "UPDATE"))["response"] == {
        "uid": "u-1", "allowed": True}


@pytest.mark.parametrize(("meta", "want"), [
    ({"name": "web-3"}, 3),
    ({"name": "web-03"}, None),
    ({"name": "web", "labels": {"apps.kubernetes.io/pod-index": "4"}}, 4),
    ({"name": "web-1", "labels": {"apps.kubernetes.io/pod-index": "2"}}, 2),
    ({"generateName": "web-"}, None),
    ({"generateName": "web-", "labels": {"apps.kubernetes.io/pod-index": "0"}}, 0),
])
def test_pod_index(meta: dict, want: int | None) -> None:
    index, why = pod_index({"metadata": meta})
    assert index == want, why


def test_generate_name_without_index_is_allowed_with_a_warning() -> None:
    pod = make_pod()
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "check-"
    resp = mutate_review(review(pod))["response"]
    assert resp["allowed"] and "patch" not in resp and "no name yet" in resp["warnings"][0]


@pytest.mark.parametrize(("spec", "why"), [
    ({"nodeName": "node1"}, "sets spec.nodeName 'node1' itself"),
    ({"schedulerName": "default-scheduler"}, "names schedulerName 'default-scheduler'"),
    ({"schedulerName": None}, "names schedulerName 'default-scheduler'"),
])
def test_pods_the_binder_will_not_bind_are_left_alone(spec: dict, why: str) -> None:
    """Attack 5: a pod that binds itself (or is bound by another scheduler) gets no
    devices from the map: they would be devices nobody booked."""
    pod = make_pod()
    pod["spec"].update(spec)
    if spec.get("schedulerName", "") is None:
        del pod["spec"]["schedulerName"]
    resp, out = answer(pod)
    assert resp["allowed"] and "patch" not in resp and out == pod
    assert why in resp["warnings"][0] and "no devices injected" in resp["warnings"][0]


def test_another_scheduler_name_can_be_configured() -> None:
    pod = make_pod()
    pod["spec"]["schedulerName"] = "my-gpu-scheduler"
    resp, _ = answer(pod, scheduler_name="my-gpu-scheduler")
    assert "patch" in resp
