"""The pod-binding controller of the seed path on the local control plane: pods
with ``schedulerName: gpu-scheduler`` bound through the Binding subresource as
their ``gpu-scheduling-map`` says, through the ledger GPUWorkloads use.

The webhook is not running here (it is tested in tests/integration/webhook): what
is checked is where each pod is bound (spec.nodeName), the devices the Binding
recorded (the ``gpu.orchestrator.dev/devices`` annotation it copies onto the pod),
and the Events. The cluster is shared: whatever a test books on node1..node4 is
released before it ends."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest

from hack.testenv import ControlPlane
from runtime import Client, NotFound
from tests.integration.controller.conftest import (
    ROOT,
    NodeGroup,
    Running,
    delete_workload,
    events_for,
    wait_condition,
    wait_phase,
    workload,
)
from tests.waiting import eventually

SAMPLE = ROOT + "/config/samples/gpu-scheduler-check-statefulset.yaml"
ARTIFACT = ROOT + "/tests/artifacts/podbinding-statefulset-pods.txt"
DEVICES = "gpu.orchestrator.dev/devices"
MAP = "gpu-scheduling-map"
SEED = {"node1": (0, 1), "node2": (2,), "node3": (0, 1, 2), "node4": (3,)}


@pytest.fixture(scope="module")
def binder(installed: ControlPlane) -> Iterator[Running]:
    """The manager with both controllers (one ledger), for this module."""
    run = Running(installed, pod_binding=True).start()
    yield run
    run.stop()


# ---------------------------------------------------------------------- helpers


def pod(name: str, *, map_text: str | None = None, gpus: int | None = None,
        node_selector: dict[str, str] | None = None,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "gpu-scheduler-check:latest"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"schedulerName": "gpu-scheduler", "containers": [container],
                            "terminationGracePeriodSeconds": 0}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {},
                         "annotations": {MAP: map_text} if map_text else {}},
            "spec": spec}


def statefulset(name: str, replicas: int, map_text: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name},
            "spec": {"serviceName": name, "replicas": replicas,
                     "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels,
                                               "annotations": {MAP: map_text}},
                                  "spec": pod("x")["spec"]}}}


def create(c: Client, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["namespace"] = ns
    return c.create(obj)


def get_pod(c: Client, ns: str, name: str) -> dict[str, Any]:
    return c.get("v1", "Pod", name, ns)


def wait_running(c: Client, ns: str, name: str, timeout: float = 30) -> dict[str, Any]:
    def check() -> dict | None:
        try:
            p = get_pod(c, ns, name)
        except NotFound:
            return None  # a StatefulSet's pod not created yet
        ok = p["spec"].get("nodeName") and p.get("status", {}).get("phase") == "Running"
        return p if ok else None
    return eventually(check, timeout=timeout, what=f"pod {ns}/{name} bound and Running")


def wait_event(c: Client, ns: str, name: str, reason: str, contains: str,
               min_count: int = 1, timeout: float = 30) -> dict[str, Any]:
    def check() -> dict | None:
        for e in events_for(c, ns, name):
            if e["reason"] == reason and contains in e["message"] and \
                    (e.get("count") or 1) >= min_count:
                return e
        return None
    try:
        return eventually(check, timeout=timeout,
                          what=f"{reason} Event containing {contains!r} on {ns}/{name}")
    except AssertionError as exc:
        seen = [(e["reason"], e["message"], e.get("count")) for e in events_for(c, ns, name)]
        raise AssertionError(f"{exc}; events: {seen}") from None


def delete_pod(c: Client, ns: str, name: str) -> None:
    with contextlib.suppress(NotFound):
        c.delete("v1", "Pod", name, namespace=ns)


def wait_gone(c: Client, ns: str, label_selector: str, timeout: float = 60) -> None:
    eventually(lambda: not c.list("v1", "Pod", namespace=ns,
                                  label_selector=label_selector)["items"],
               timeout=timeout, what=f"pods {label_selector} in {ns} gone")


def holder(run: Running, node: str, device: int) -> str | None:
    state = run.reconciler.ensure_state()
    return state.view().holder(node, device)


# ------------------------------------------------------------------------ tests


def test_seed_statefulset_pods_are_bound_as_the_map_says(
        binder: Running, admin: Client, namespace: str) -> None:
    # The cluster is shared: earlier modules' seed workloads must have let go.
    eventually(lambda: all(holder(binder, n, d) is None for n, ds in SEED.items() for d in ds),
               timeout=60, what="node1..node4's seed devices free")
    cluster = binder.cluster
    cluster.kubectl("apply", "-n", namespace, "-f", SAMPLE)
    try:
        names = [f"gpu-scheduler-check-{i}" for i in range(5)]
        pods = [wait_running(admin, namespace, n, timeout=60) for n in names]
        got = [(p["metadata"]["name"], p["spec"]["nodeName"],
                p["metadata"]["annotations"].get(DEVICES)) for p in pods]
        assert got == [("gpu-scheduler-check-0", "node1", "0,1"),
                       ("gpu-scheduler-check-1", "node2", "2"),
                       ("gpu-scheduler-check-2", "node3", "0,1,2"),
                       ("gpu-scheduler-check-3", "node4", "3"),
                       ("gpu-scheduler-check-4", "node4", "3")]
        for n in names:  # bound by this scheduler, through the Binding subresource
            e = wait_event(admin, namespace, n, "Scheduled", "Successfully assigned")
            assert e["source"]["component"] == "gpu-scheduler"
        # One StatefulSet holds them all, replicas 3 and 4 sharing node4:3.
        sts = f"StatefulSet:{namespace}/gpu-scheduler-check"
        assert {holder(binder, n, d) for n, ds in SEED.items() for d in ds} == {sts}
        out = cluster.kubectl("get", "pod", "-o", "wide", "-n", namespace)
        os.makedirs(os.path.dirname(ARTIFACT), exist_ok=True)
        with open(ARTIFACT, "w") as f:
            f.write(out.stdout)
    finally:
        cluster.kubectl("delete", "-n", namespace, "-f", SAMPLE, "--wait=false")
        wait_gone(admin, namespace, "app=gpu-scheduler-check")
    # Deleted pods give their devices back.
    eventually(lambda: all(holder(binder, n, d) is None for n, ds in SEED.items() for d in ds),
               what="seed devices released")


def test_index_missing_from_the_map_is_an_event_and_the_pod_stays_pending(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = group.add(1, gpus=2)
    create(admin, namespace, pod("lonely-7", map_text=f"0={node}:0\n1={node}:1"))
    e = wait_event(admin, namespace, "lonely-7", "FailedScheduling",
                   "no entry for replica index 7", min_count=2)
    assert e["type"] == "Warning"
    assert "it maps index(es) 0, 1" in e["message"]
    p = get_pod(admin, namespace, "lonely-7")
    assert not p["spec"].get("nodeName")
    assert p["status"]["phase"] == "Pending"


def test_unknown_node_and_device_beyond_the_node_are_events(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = group.add(1, gpus=2)
    create(admin, namespace, pod("far-0", map_text="0=no-such-node:0"))
    create(admin, namespace, pod("big-0", map_text=f"0={node}:1,2"))
    wait_event(admin, namespace, "far-0", "FailedScheduling",
               "no-such-node: replica 0: node not found")
    wait_event(admin, namespace, "big-0", "FailedScheduling",
               f"{node}: replica 0: device 2 does not exist (2 GPUs)")
    for name in ("far-0", "big-0"):
        assert not get_pod(admin, namespace, name)["spec"].get("nodeName")


def test_a_statefulset_shares_its_own_device_but_not_with_another(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = group.add(1, gpus=2)
    create(admin, namespace, statefulset("a", 2, f"0={node}:0\n1={node}:0"))
    for name in ("a-0", "a-1"):
        p = wait_running(admin, namespace, name)
        assert (p["spec"]["nodeName"], p["metadata"]["annotations"][DEVICES]) == (node, "0")
    create(admin, namespace, statefulset("b", 1, f"0={node}:0"))
    wait_event(admin, namespace, "b-0", "FailedScheduling",
               f"device 0 held by StatefulSet {namespace}/a")
    assert not get_pod(admin, namespace, "b-0")["spec"].get("nodeName")
    # Scaling a down to nothing frees device 0, and b's pod is bound at once.
    admin.patch("apps/v1", "StatefulSet", "a", {"spec": {"replicas": 0}}, namespace=namespace,
                patch_type="merge")
    p = wait_running(admin, namespace, "b-0", timeout=30)
    assert p["metadata"]["annotations"][DEVICES] == "0"


def test_device_held_by_a_gpuworkload_is_refused_to_a_seed_pod(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = group.add(1, gpus=2)
    admin.create(workload("holder", namespace, annotations={MAP: f"0={node}:1"},
                          schedulingStrategy="annotationMap"))
    wait_phase(admin, namespace, "holder", "Running")
    create(admin, namespace, pod("wants-0", map_text=f"0={node}:1"))
    wait_event(admin, namespace, "wants-0", "FailedScheduling",
               f"device 1 held by {namespace}/holder")
    assert not get_pod(admin, namespace, "wants-0")["spec"].get("nodeName")
    delete_workload(admin, namespace, "holder")
    p = wait_running(admin, namespace, "wants-0")
    assert (p["spec"]["nodeName"], p["metadata"]["annotations"][DEVICES]) == (node, "1")


def test_device_held_by_a_seed_pod_is_refused_to_a_gpuworkload(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = group.add(1, gpus=2)
    create(admin, namespace, pod("first-0", map_text=f"0={node}:0"))
    wait_running(admin, namespace, "first-0")
    admin.create(workload("second", namespace, annotations={MAP: f"0={node}:0"},
                          schedulingStrategy="annotationMap",
                          retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
    cond = wait_condition(admin, namespace, "second", "Scheduled", "Unschedulable")
    assert f"device 0 held by Pod {namespace}/first-0" in cond["message"]
    # The pod finishes: its device returns, and the workload is woken long before
    # its 60 s backoff.
    binder.cluster.set_pod_phase(namespace, "first-0", "Succeeded")
    w = wait_phase(admin, namespace, "second", "Running", timeout=20)
    assert w["status"]["placements"] == [{"index": 0, "node": node, "devices": [0]}]
    delete_workload(admin, namespace, "second")


def test_pods_without_a_map_are_placed_by_the_default_strategy(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = group.add(1, gpus=2)
    create(admin, namespace, pod("plugin", gpus=2, node_selector=group.selector))
    p = wait_running(admin, namespace, "plugin")
    assert p["spec"]["nodeName"] == node
    assert DEVICES not in (p["metadata"].get("annotations") or {})  # the device plugin picks
    create(admin, namespace, pod("more", gpus=1, node_selector=group.selector))
    wait_event(admin, namespace, "more", "FailedScheduling", "needs 1")
    assert not get_pod(admin, namespace, "more")["spec"].get("nodeName")
    delete_pod(admin, namespace, "plugin")
    p = wait_running(admin, namespace, "more")
    assert p["spec"]["nodeName"] == node


def test_a_pod_asking_more_gpus_than_a_pod_may_have_is_told_what_it_asked(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    group.add(1, gpus=8)
    create(admin, namespace, pod("huge", gpus=100, node_selector=group.selector))
    e = wait_event(admin, namespace, "huge", "FailedScheduling",
                   "the pod requests 100 nvidia.com/gpu, more than the 64 one pod may have")
    assert "needs 64" not in e["message"]
    assert not get_pod(admin, namespace, "huge")["spec"].get("nodeName")


def test_unannotated_pod_without_gpu_request_reserves_one_named_device(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = group.add(1, gpus=1)
    create(admin, namespace, pod("plain", node_selector=group.selector))
    p = wait_running(admin, namespace, "plain")
    assert (p["spec"]["nodeName"], p["metadata"]["annotations"][DEVICES]) == (node, "0")
    create(admin, namespace, pod("plain2", node_selector=group.selector))
    wait_event(admin, namespace, "plain2", "FailedScheduling", "needs 1")


def test_bookings_are_rebuilt_after_a_restart(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = group.add(1, gpus=2)
    create(admin, namespace, pod("kept-0", map_text=f"0={node}:0,1"))
    wait_running(admin, namespace, "kept-0")
    binder.stop()
    binder.start()  # a new manager: the ledger is rebuilt from the cache
    create(admin, namespace, pod("late-0", map_text=f"0={node}:1"))
    wait_event(admin, namespace, "late-0", "FailedScheduling",
               f"device 1 held by Pod {namespace}/kept-0")
    # ... and the GPUWorkload side sees the same ledger.
    admin.create(workload("gw", namespace, annotations={MAP: f"0={node}:0"},
                          schedulingStrategy="annotationMap"))
    cond = wait_condition(admin, namespace, "gw", "Scheduled", "Unschedulable")
    assert f"held by Pod {namespace}/kept-0" in cond["message"]
    delete_workload(admin, namespace, "gw")


def test_a_bound_pod_with_malformed_annotations_is_reported_and_still_holds(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """Bound at creation (``spec.nodeName``, no webhook) with annotations this scheduler
    cannot read: a BadAnnotation Warning says so and what the pod is taken to hold,
    and that stays held (never nothing)."""
    node, = binder.wait_nodes(group.add(1, gpus=2))
    odd = pod("odd-0", map_text=f"0={node}:1")
    odd["metadata"]["annotations"][DEVICES] = "0,x"
    odd["spec"]["nodeName"] = node
    create(admin, namespace, odd)
    e = wait_event(admin, namespace, "odd-0", "BadAnnotation",
                   f"annotation {DEVICES}='0,x' is not a list of device indices")
    assert e["type"] == "Warning" and e["source"]["component"] == "gpu-scheduler"
    assert e["message"].endswith(f"it is taken to hold GPU devices 1 on {node}")
    broken = pod("broken-0", map_text="0=garbage")
    broken["spec"]["nodeName"] = node
    create(admin, namespace, broken)
    e = wait_event(admin, namespace, "broken-0", "BadAnnotation", f"annotation {MAP}:")
    assert e["message"].endswith(f"it is taken to hold 1 GPU(s) on {node}, counted")
    # What a user notices: the node's two GPUs are taken, by those two pods.
    create(admin, namespace, pod("next-0", map_text=f"0={node}:1"))
    wait_event(admin, namespace, "next-0", "FailedScheduling",
               f"device 1 held by Pod {namespace}/odd-0")
    create(admin, namespace, pod("last-0", map_text=f"0={node}:0"))
    wait_event(admin, namespace, "last-0", "FailedScheduling", "0 free GPUs, needs 1")
    for name in ("odd-0", "broken-0"):  # reported once, not on every read
        assert [ev.get("count") or 1 for ev in events_for(admin, namespace, name)
                if ev["reason"] == "BadAnnotation"] == [1]


@pytest.mark.parametrize("devices, why, holds", [
    ("99", "names device(s) 99, which {node} does not have (it has 0,1)",
     "it is taken to hold 1 GPU(s) on {node}, counted"),
    ("1,1", "='1,1' names a device twice", "it is taken to hold GPU devices 1 on {node}"),
])
def test_a_seed_pod_naming_a_phantom_or_repeated_device_is_a_bad_annotation(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,
        devices: str, why: str, holds: str) -> None:
    """Issue 23: ``"99"`` on a 2-GPU node was booked as device 99 (and shown), and
    ``"3,3"`` was read as ``"3"`` without a word."""
    node, = binder.wait_nodes(group.add(1, gpus=2))
    odd = pod("odd-0", map_text=f"0={node}:1")
    odd["metadata"]["annotations"][DEVICES] = devices
    odd["spec"]["nodeName"] = node
    create(admin, namespace, odd)
    e = wait_event(admin, namespace, "odd-0", "BadAnnotation", why.format(node=node))
    assert e["message"].endswith(holds.format(node=node))
    state = binder.reconciler.ensure_state()
    assert state.view().holder(node, 99) is None


def test_a_map_on_the_statefulsets_own_metadata_gets_an_event_naming_the_template(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """A seed user's slip: the map on the StatefulSet's metadata, not its pod
    template's. Its pods carry no map, so they are placed by the default strategy
    without CUDA_VISIBLE_DEVICES; a MapNotOnTemplate Warning Event on the StatefulSet
    says where the annotation belongs (before: placed, and nothing said)."""
    node, = group.add(1, gpus=2)
    sts = statefulset("slip", 2, f"0={node}:0\n1={node}:1")
    template = sts["spec"]["template"]
    sts["metadata"]["annotations"] = template["metadata"].pop("annotations")
    template["spec"]["nodeSelector"] = group.selector
    create(admin, namespace, sts)
    try:
        for i in range(2):
            p = wait_running(admin, namespace, f"slip-{i}")
            assert MAP not in (p["metadata"].get("annotations") or {})
        e = wait_event(admin, namespace, "slip", "MapNotOnTemplate",
                       "move it to spec.template.metadata.annotations")
        assert e["involvedObject"]["kind"] == "StatefulSet" and e["type"] == "Warning"
        assert (e.get("count") or 1) == 1  # once per StatefulSet, not per pod
    finally:
        admin.delete("apps/v1", "StatefulSet", "slip", namespace=namespace)
        wait_gone(admin, namespace, "app=slip")
