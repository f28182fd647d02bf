"""What a user reads about a workload describes the present, as kubectl shows it:
``kubectl get gw`` (the API server's Table, built from the CRD's printer columns)
says why a workload is pending; a workload that gave up keeps ``Scheduled=False``
and a ``FailedScheduling`` Event (docs/alerts.md's field selector finds it); a
preemptor that runs says where it was placed, not what it waited for; the manager's
``--default-strategy`` reaches a workload that names none."""

from __future__ import annotations

import json

from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    delete_workload,
    get_workload,
    wait_condition,
    wait_events,
    wait_phase,
    workload,
)

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def get_gw(cluster: ControlPlane, ns: str) -> dict[str, dict[str, object]]:
    """``kubectl get gw -o wide``: name -> column -> cell, as kubectl receives it."""
    code, table = cluster.api("GET", f"/apis/gpu.orchestrator.dev/v1alpha1/namespaces/{ns}/"
                              "gpuworkloads", headers={"Accept": TABLE})
    assert code == 200, table
    names = [c["name"] for c in table["columnDefinitions"]]
    return {row["cells"][0]: dict(zip(names, row["cells"], strict=True))
            for row in table["rows"]}


def test_kubectl_get_gw_says_why_it_is_pending_and_a_failed_one_keeps_scheduled_false(
        installed: ControlPlane, controller: Running, admin: Client, namespace: str,
        group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=1))
    admin.create(workload("big", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          retryPolicy={"maxRetries": 5, "backoffSeconds": 60}))
    wait_condition(admin, namespace, "big", "Scheduled", "Unschedulable")
    row = get_gw(installed, namespace)["big"]
    assert (row["Phase"], row["Reason"], row["Strategy"], row["GPUs"]) == \
        ("Pending", "Unschedulable", "leastLoaded", "0"), row
    assert f"{node}: 1 free GPU, needs 2" in str(row["Message"]), row

    # maxRetries 0: Failed at once, and still Scheduled=False with the reasons
    admin.create(workload("hopeless", namespace, gpusPerReplica=2,
                          nodeSelector=group.selector, retryPolicy={"maxRetries": 0}))
    w = wait_phase(admin, namespace, "hopeless", "Failed")
    cond = next(c for c in w["status"]["conditions"] if c["type"] == "Scheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable"), cond
    assert f"{node}: 1 free GPU, needs 2" in cond["message"]
    wait_events(admin, namespace, "hopeless", "FailedScheduling")
    # the commands of docs/usage.md and docs/alerts.md find it
    for cond in ("Scheduled=false", "Failed"):
        done = installed.kubectl("wait", "gw/hopeless", "-n", namespace,
                                 f"--for=condition={cond}", "--timeout=10s")
        assert "condition met" in done.stdout
    events = installed.kubectl("get", "events", "-n", namespace, "--field-selector",
                               "reason=FailedScheduling,involvedObject.name=hopeless").stdout
    assert "FailedScheduling" in events, events
    listed = installed.kubectl("get", "events", "-A", "--field-selector",
                               "reason=FailedScheduling", "-o", "json").stdout
    assert any(e["involvedObject"]["name"] == "hopeless" and
               "unschedulable and maxRetries is 0" in e["message"]
               for e in json.loads(listed)["items"])
    assert get_gw(installed, namespace)["hopeless"]["Reason"] == "Unschedulable"
    wide = installed.kubectl("get", "gw", "-n", namespace, "-o", "wide").stdout
    header, *rows = wide.splitlines()
    assert header.split()[:3] == ["NAME", "PHASE", "REASON"] and "MESSAGE" in header
    assert any(r.split()[:3] == ["big", "Pending", "Unschedulable"] and
               f"{node}: 1 free GPU, needs 2" in r for r in rows), wide
    delete_workload(admin, namespace, "big")
    delete_workload(admin, namespace, "hopeless")


def test_a_running_preemptor_says_where_it_was_placed(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=2))
    tpl = {"spec": {"terminationGracePeriodSeconds": 2,
                    "containers": [{"name": "main", "image": "busybox:1.36"}]}}
    admin.create(workload("low", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          priority="low", template=tpl,
                          retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
    wait_phase(admin, namespace, "low", "Running")
    admin.create(workload("high", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          priority="high", schedulingStrategy="priority", template=tpl))
    wait_condition(admin, namespace, "high", "Scheduled", "WaitingForPreemption")
    wait_phase(admin, namespace, "high", "Running", timeout=60)
    cond = wait_condition(admin, namespace, "high", "Scheduled", "Scheduled")
    assert (cond["status"], cond["message"]) == ("True", f"placed 1 replica(s) on {node}")
    assert get_workload(admin, namespace, "high")["status"]["strategy"] == "priority"
    delete_workload(admin, namespace, "high")
    delete_workload(admin, namespace, "low")


def test_the_managers_default_strategy_reaches_a_workload_that_names_none(
        installed: ControlPlane, controller: Running, admin: Client, namespace: str,
        group: NodeGroup) -> None:
    controller.stop()
    packing = Running(installed, default_strategy="bestFit").start()
    try:
        packing.wait_nodes(group.add(2, gpus=4))
        placed = []
        for name in ("a", "b"):
            admin.create(workload(name, namespace, gpusPerReplica=1,
                                  nodeSelector=group.selector))
            w = wait_phase(admin, namespace, name, "Running")
            assert "schedulingStrategy" not in w["spec"]  # the CRD sets no default
            assert w["status"]["strategy"] == "bestFit"
            placed.append(w["status"]["placements"][0]["node"])
        assert placed[0] == placed[1], "bestFit packs; leastLoaded would have spread"
        assert get_gw(installed, namespace)["a"]["Strategy"] == "bestFit"
        for name in ("a", "b"):
            delete_workload(admin, namespace, name)
    finally:
        packing.stop()
        controller.start()
