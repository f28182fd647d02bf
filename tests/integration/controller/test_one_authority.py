"""One authority per node (issue 35), as a user tries it with kube-scheduler running
beside the manager: kube-scheduler places any pod that asks for ``nvidia.com/gpu``,
the device plugin picks its devices, and the ledger names devices for ours.

- A named node (label ``gpu.orchestrator.dev/device-authority=named`` and its
  ``NoSchedule`` taint): our workload runs there, kube-scheduler's GPU pods never do;
- a pod forced there by ``spec.nodeName`` over-commits it: reported on the pod and
  evicted through the Eviction API; a running one is evicted once its
  PodDisruptionBudget allows;
- a counted node: the ledger never names devices there;
- a namespace labelled ``gpu.orchestrator.dev/scheduler=gpu-scheduler``: a plain GPU
  pod is routed to gpu-scheduler by the webhook and bound with exact devices."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from api.v1alpha1.keys import (
    DEVICE_AUTHORITY_LABEL,
    DEVICES_ANNOTATION,
    SCHEDULER_ROUTE_LABEL,
)
from hack.testenv import ControlPlane
from internal.cli.main import main
from internal.metrics.domain import DEVICE_CONFLICTS
from runtime import Client, NotFound
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    events_for,
    pods_of,
    wait_condition,
    wait_events,
    wait_phase,
    workload,
)
from tests.integration.webhook.helpers import running_webhook
from tests.waiting import eventually

TAINT = {"key": DEVICE_AUTHORITY_LABEL, "value": "named", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def manager(installed: ControlPlane) -> Iterator[Running]:
    """kube-scheduler, and our manager with the pod binding and the evictor."""
    installed.start_scheduler()
    run = Running(installed, pod_binding=True, evict_conflicting_pods=True).start()
    try:
        yield run
    finally:
        run.stop()
        installed.stop_scheduler()


def named_nodes(manager: Running, admin: Client, group: NodeGroup, count: int) -> list[str]:
    """Nodes an admin made named, as docs/install.md says: the label and the taint."""
    names = group.add(count, gpus=4, labels={DEVICE_AUTHORITY_LABEL: "named"})
    for n in names:
        admin.patch("v1", "Node", n, {"spec": {"taints": [TAINT]}})
    for n in names:
        manager.sees(n, lambda i: i.taints and i.labels.get(DEVICE_AUTHORITY_LABEL), "named")
    return names


def gpu_pod(name: str, ns: str, gpus: int, *, selector: dict[str, str] | None = None,
            node: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An ordinary pod asking ``nvidia.com/gpu`` (the default scheduler's unless
    ``node`` binds it by ``spec.nodeName``)."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "busybox:1.36",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if selector:
        spec["nodeSelector"] = selector
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": spec}


def node_of(admin: Client, ns: str, name: str) -> str | None:
    return (admin.get("v1", "Pod", name, ns).get("spec") or {}).get("nodeName")


def unschedulable(admin: Client, ns: str, name: str) -> str | None:
    """kube-scheduler's PodScheduled=False message, once it said it."""
    for c in (admin.get("v1", "Pod", name, ns).get("status") or {}).get("conditions") or ():
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return c.get("message") or c.get("reason")
    return None


def gpu_nodes(cluster: ControlPlane, node: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["nodes", node, "--kubeconfig", str(cluster.kubeconfig)]) == 0
    return capsys.readouterr().out


def test_kube_scheduler_never_places_gpu_pods_where_our_workload_holds_the_devices(
        manager: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """The issue's first order: 3 x 4 GPUs of ours, then three ordinary pods asking
    for 4 each. Before, kube-scheduler put two of them on our nodes (8 on 4)."""
    named = named_nodes(manager, admin, group, 3)
    (counted,) = group.add(1, gpus=4, labels={DEVICE_AUTHORITY_LABEL: "counted"})
    admin.create(workload("train", namespace, replicas=3, gpusPerReplica=4,
                          nodeSelector={**group.selector, DEVICE_AUTHORITY_LABEL: "named"}))
    w = wait_phase(admin, namespace, "train", "Running", timeout=60)
    assert sorted(p["node"] for p in w["status"]["placements"]) == sorted(named)
    for i in range(3):
        admin.create(gpu_pod(f"plain-{i}", namespace, 4, selector=group.selector))
    # one fits the counted node; the other two wait, kept off the named nodes by the taint
    eventually(lambda: sum(bool(node_of(admin, namespace, f"plain-{i}")) for i in range(3)) == 1
               and sum(bool(unschedulable(admin, namespace, f"plain-{i}")) for i in range(3))
               == 2, timeout=60, what="kube-scheduler placed one plain pod, refused two")
    bound = [node_of(admin, namespace, f"plain-{i}") for i in range(3)]
    assert [n for n in bound if n] == [counted]
    assert all("untolerated taint" in (unschedulable(admin, namespace, f"plain-{i}") or "")
               for i in range(3) if not bound[i])


def gone(admin: Client, ns: str, name: str) -> bool:
    try:
        return bool(admin.get("v1", "Pod", name, ns)["metadata"].get("deletionTimestamp"))
    except NotFound:
        return True


def test_a_pod_forced_onto_a_named_node_is_reported_and_evicted(
        manager: Running, admin: Client, cluster: ControlPlane, namespace: str,
        group: NodeGroup, capsys: pytest.CaptureFixture[str]) -> None:
    """Beside a running manager: reported, and evicted as soon as it is seen (most
    likely still Pending: kube-apiserver evicts a Pending pod whatever a
    PodDisruptionBudget says, so a budget is the next test's). Terminating, it holds
    its GPUs for its grace period (the local kubelet keeps it up to 10 s), and
    ``kubectl gpu nodes`` shows the over-commit."""
    (node,) = named_nodes(manager, admin, group, 1)
    admin.create(workload("ours", namespace, gpusPerReplica=4,
                          nodeSelector=group.selector))
    wait_phase(admin, namespace, "ours", "Running", timeout=60)
    evicted = DEVICE_CONFLICTS.labels("evicted")._value.get()
    forced = gpu_pod("forced", namespace, 4, node=node)
    forced["spec"]["terminationGracePeriodSeconds"] = 30
    admin.create(forced)
    eventually(lambda: admin.get("v1", "Pod", "forced", namespace)["metadata"]
               .get("deletionTimestamp"), timeout=60, what="the forced pod evicted")
    out = gpu_nodes(cluster, node, capsys)
    assert "8 of 4" in out and f"{node}: ALLOCATED 8 of 4" in out, out
    assert " free " not in out, out
    conflict = next(e["message"] for e in wait_events(admin, namespace, "forced",
                                                        "DeviceConflict")
                    if "evicting the pod" in e["message"])
    assert f"{node}: over-committed: 8 GPUs held on its 4 devices" in conflict, conflict
    assert f"{namespace}/ours" in conflict
    eventually(lambda: DEVICE_CONFLICTS.labels("evicted")._value.get() > evicted,
               timeout=10, what="the eviction counted")
    assert pods_of(admin, namespace, "ours")[0]["status"]["phase"] == "Running"


def keep_forced(admin: Client, namespace: str) -> None:
    """A PodDisruptionBudget that lets no pod labelled ``app: forced`` go."""
    admin.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                  "metadata": {"name": "keep", "namespace": namespace},
                  "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "forced"}}}})


def running_while_down(manager: Running, admin: Client, pod: dict[str, Any],
                       before: Callable[[], None] = lambda: None) -> None:
    """``pod`` created (after ``before``) and Running while the manager is stopped."""
    meta = pod["metadata"]
    manager.stop()
    try:
        before()
        admin.create(pod)
        eventually(lambda: (admin.get("v1", "Pod", meta["name"], meta["namespace"])
                            .get("status") or {}).get("phase") == "Running",
                   timeout=60, what=f"{meta['name']} running")
    finally:
        manager.start()


def budget_goes(admin: Client, namespace: str, name: str) -> None:
    """The budget is deleted: the pod's next update is asked again, and it goes."""
    admin.delete("policy/v1", "PodDisruptionBudget", "keep", namespace=namespace)
    admin.patch("v1", "Pod", name, {"metadata": {"labels": {"touched": "1"}}},
                namespace=namespace)
    eventually(lambda: gone(admin, namespace, name), timeout=60, what="the pod evicted")


def test_a_running_intruder_is_evicted_once_its_pdb_allows(
        manager: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """A pod that gave itself devices while the manager was down, running when the
    manager's sweep finds it: its PodDisruptionBudget refuses the eviction
    (``EvictionFailed``), and once the budget is gone its next update is asked
    again. (Beside a running manager a pod is usually still Pending when its
    eviction comes, and kube-apiserver evicts a Pending pod whatever its budget
    says: before, the test above waited for this refusal, and failed when the
    eviction came first.)"""
    (node,) = named_nodes(manager, admin, group, 1)
    keep_forced(admin, namespace)
    pod = gpu_pod("forged", namespace, 0, node=node, labels={"app": "forced"})
    pod["metadata"]["annotations"] = {DEVICES_ANNOTATION: "0,1"}
    running_while_down(manager, admin, pod)
    events = wait_events(admin, namespace, "forged", "UnauthorizedDevices", "EvictionFailed",
                         timeout=60)
    refused = next(e["message"] for e in events if e["reason"] == "EvictionFailed")
    assert "disruption budget" in refused, refused
    budget_goes(admin, namespace, "forged")


def test_a_pod_forced_while_the_manager_was_down_is_found_over_committing(
        manager: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """A pod forced beside our running workload while the manager was down: the
    manager's rebuild finds it over-committing its node (it came last) and evicts it
    once its PodDisruptionBudget allows. Before, the rebuild booked pods before it
    knew any node's devices, so no pod was ever found over-committing after a
    restart, and this one ran on our devices unreported."""
    (node,) = named_nodes(manager, admin, group, 1)
    admin.create(workload("ours", namespace, gpusPerReplica=4, nodeSelector=group.selector))
    wait_phase(admin, namespace, "ours", "Running", timeout=60)
    keep_forced(admin, namespace)
    ours = pods_of(admin, namespace, "ours")[0]["metadata"]["creationTimestamp"]
    # a second later than our pod: the rebuild knows which came last
    running_while_down(manager, admin, gpu_pod("forced", namespace, 4, node=node,
                                                labels={"app": "forced"}),
                       before=lambda: eventually(
                           lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) > ours,
                           timeout=5, what="a second after our pod"))
    events = wait_events(admin, namespace, "forced", "DeviceConflict", "EvictionFailed",
                         timeout=60)
    conflict = next(e["message"] for e in events if e["reason"] == "DeviceConflict")
    assert f"{node}: over-committed: 8 GPUs held on its 4 devices" in conflict, conflict
    budget_goes(admin, namespace, "forced")
    assert pods_of(admin, namespace, "ours")[0]["status"]["phase"] == "Running"


def test_on_a_counted_node_the_ledger_never_names_devices(
        manager: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """The issue's second order: kube-scheduler's pod takes 2 GPUs (the device plugin
    picks which); before, we then named devices 0,1 there, maybe the very same."""
    (node,) = manager.wait_nodes(group.add(1, gpus=4,
                                           labels={DEVICE_AUTHORITY_LABEL: "counted"}))
    admin.create(gpu_pod("first", namespace, 2, selector=group.selector))
    eventually(lambda: node_of(admin, namespace, "first") == node, timeout=60,
               what="kube-scheduler bound the first pod")
    admin.create(workload("named", namespace, gpusPerReplica=2, nodeSelector=group.selector))
    cond = wait_condition(admin, namespace, "named", "Scheduled", "Unschedulable", timeout=60)
    assert f"{node}: device authority counted ({DEVICE_AUTHORITY_LABEL}), not named" in \
        cond["message"], cond["message"]
    # a device-plugin workload counts there, and kube-scheduler sees its request
    admin.create(workload("counted", namespace, gpusPerReplica=2, nodeSelector=group.selector,
                          deviceExposure="device-plugin"))
    wait_phase(admin, namespace, "counted", "Running", timeout=60)
    admin.create(gpu_pod("second", namespace, 2, selector=group.selector))
    eventually(lambda: unschedulable(admin, namespace, "second"), timeout=60,
               what="kube-scheduler finds no room for the second pod")
    assert node_of(admin, namespace, "second") is None
    assert not [e for e in events_for(admin, namespace, "second")
                if e["reason"] == "DeviceConflict"]


@pytest.fixture
def routed(admin: Client, namespace: str) -> str:
    admin.patch("v1", "Namespace", namespace,
                {"metadata": {"labels": {SCHEDULER_ROUTE_LABEL: "gpu-scheduler"}}})
    return namespace


def test_a_plain_gpu_pod_of_a_labelled_namespace_is_bound_by_gpu_scheduler_with_devices(
        manager: Running, admin: Client, cluster: ControlPlane, routed: str,
        group: NodeGroup, tmp_path: Path) -> None:
    (node,) = named_nodes(manager, admin, group, 1)
    with running_webhook(cluster, tmp_path):
        # the webhook is answering once a dry run of the pod comes back routed (its CA
        # bundle patched in, the API server's webhook configuration caught up)
        eventually(lambda: admin.create(gpu_pod("plain", routed, 2, selector=group.selector),
                                        dry_run=True)["spec"]["schedulerName"]
                   == "gpu-scheduler", timeout=30, what="the webhook routes GPU pods")
        admin.create(gpu_pod("plain", routed, 2, selector=group.selector))
        pod = admin.get("v1", "Pod", "plain", routed)
        assert pod["spec"]["schedulerName"] == "gpu-scheduler"
        assert TAINT | {"operator": "Equal"} in pod["spec"]["tolerations"]
        eventually(lambda: node_of(admin, routed, "plain") == node, timeout=60,
                   what="gpu-scheduler bound the routed pod")
        pod = admin.get("v1", "Pod", "plain", routed)
        assert pod["metadata"]["annotations"][DEVICES_ANNOTATION] == "0,1"
        # a second one gets the other two, named too
        admin.create(gpu_pod("plain-2", routed, 2, selector=group.selector))
        eventually(lambda: node_of(admin, routed, "plain-2") == node, timeout=60,
                   what="gpu-scheduler bound the second routed pod")
        second = admin.get("v1", "Pod", "plain-2", routed)
        assert second["metadata"]["annotations"][DEVICES_ANNOTATION] == "2,3"
        with contextlib.suppress(NotFound):
            admin.delete("v1", "Pod", "plain-2", namespace=routed)
