"""One bad node, or one impossible map, as a user meets them: a Node whose status
says ``nvidia.com/gpu: 1000000`` (an admin's typo, a broken device plugin) is
refused with one Warning Event, named in why-pending, and every other workload is
still placed within seconds; a whole-GPU map naming a MIG-enabled device is
Pending with its reason, and the manager does not loop on reconcile errors."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY

from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    cleanup_gpunodes,
    delete_workload,
    events_for,
    get_workload,
    wait_condition,
    wait_phase,
    workload,
)
from tests.integration.controller.test_sharing import MIG_UUIDS, _device, _report
from tests.waiting import eventually

MILLION = "1000000"
RETRY = {"maxRetries": 50, "backoffSeconds": 1, "maxBackoffSeconds": 2}


def reconcile_errors() -> float:
    return REGISTRY.get_sample_value("controller_runtime_reconcile_errors_total",
                                     {"controller": "gpuworkload"}) or 0.0


def test_a_node_reporting_a_million_gpus_stalls_no_placement_and_is_named(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    good, bad = controller.wait_nodes(group.add(2, gpus=2))
    # as an admin (or a broken device plugin) would write it: the Node's status
    admin.patch("v1", "Node", bad, {"status": {"capacity": {"nvidia.com/gpu": MILLION},
                                               "allocatable": {"nvidia.com/gpu": MILLION}}},
                subresource="status")
    # the controller has taken the report in (refused; before, a million devices)
    controller.sees(bad, lambda i: getattr(i, "refused", "") or len(i.devices) > 2,
                    "its new report")
    started = time.monotonic()
    admin.create(workload("share", namespace, gpuShare={"fraction": "0.5"},
                          nodeSelector=group.selector))
    admin.create(workload("whole", namespace, nodeSelector=group.selector))
    for name in ("share", "whole"):
        w = wait_phase(admin, namespace, name, "Running", timeout=15)
        assert w["status"]["placements"][0]["node"] == good
    took = time.monotonic() - started
    assert took < 10, f"two workloads took {took:.1f} s to run beside the bad node"

    admin.create(workload("four", namespace, gpusPerReplica=4, nodeSelector=group.selector,
                          retryPolicy=RETRY))
    cond = wait_condition(admin, namespace, "four", "Scheduled", "Unschedulable")
    assert f"{bad}: reports 1000000 GPUs, more than 64; excluded" in cond["message"]

    def refused_event() -> dict | None:
        return next((e for e in events_for(admin, "default", bad)
                     if e["reason"] == "TooManyGPUs"), None)
    event = eventually(refused_event, timeout=15, what=f"TooManyGPUs Event on {bad}")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Node"
    assert f"{bad} reports 1000000 GPUs, more than 64; excluded" in event["message"]
    # the kubelet's next status write says the same: no second Event
    admin.patch("v1", "Node", bad, {"metadata": {"labels": {"touched": "yes"}}})
    time.sleep(2)
    events = [e for e in events_for(admin, "default", bad) if e["reason"] == "TooManyGPUs"]
    assert [e.get("count") or 1 for e in events] == [1], events
    for name in ("share", "whole", "four"):
        delete_workload(admin, namespace, name)


def test_a_whole_gpu_map_naming_a_mig_device_is_pending_with_its_reason(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=2))
    mig = [{"uuid": u, "profile": "1g.10gb", "memoryTotalMiB": 9984} for u in MIG_UUIDS]
    with cleanup_gpunodes(admin, node):
        _report(admin, node, [_device(node, 0, migMode=True, migInstances=mig),
                              _device(node, 1)])
        controller.sees(node, lambda i: i.usable == frozenset({1}), "device 0 MIG-enabled")
        errors = reconcile_errors()
        admin.create(workload("mapped", namespace, schedulingStrategy="annotationMap",
                              schedulingMap=f"0={node}:0", retryPolicy=RETRY))
        cond = wait_condition(admin, namespace, "mapped", "Scheduled", "Unschedulable")
        assert (f"{node}: replica 0: device 0 MIG-enabled: offered only as MIG instances "
                "(spec.migProfile)") in cond["message"]
        assert get_workload(admin, namespace, "mapped")["status"]["phase"] == "Pending"
        time.sleep(3)  # a few of its retries (1-2 s apart)
        assert reconcile_errors() == errors, "reconcile errors while it waits"
        delete_workload(admin, namespace, "mapped")
