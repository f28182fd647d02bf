"""Issue 23's three attacks that succeeded, each tried by ``tenant-a`` (the ``edit``
role in its namespace, through impersonation) against another tenant's workload in
another namespace, with config/ installed: refused at admission, or changing nothing.

1. a priority the tenant chose preempts another tenant;
2. editing a pod's devices annotation books more devices;
3. a bare pod gives itself devices (annotation, device env, a Job's template).

Where the policy is missing, what slips through is evicted (the last test)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import DEVICES_ANNOTATION, GROUP_SLOTS_ANNOTATION
from api.v1alpha1.priority_policies import MAX_PRIORITY_LABEL
from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client, NotFound, errors
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    events_for,
    get_workload,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.waiting import eventually

ONLY_OURS = "only the gpu-orchestrator controller and webhook give pods GPU devices"


@pytest.fixture
def team_b(admin: Client) -> Iterator[str]:
    """Bob's namespace."""
    name = f"b-{uuid.uuid4().hex[:8]}"
    admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    admin.delete("v1", "Namespace", name)


@pytest.fixture
def priority_class(admin: Client) -> Iterator[str]:
    name = f"team-high-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                  "metadata": {"name": name}, "value": 1000})
    yield name
    with contextlib.suppress(NotFound):
        admin.delete("scheduling.k8s.io/v1", "PriorityClass", name)


def _bob_runs(admin: Client, controller: Running, group: NodeGroup, ns: str) -> None:
    controller.wait_nodes(group.add(1, gpus=2))
    admin.create(workload("bob", ns, priority=50, gpusPerReplica=2,
                          nodeSelector=group.selector))
    wait_phase(admin, ns, "bob", "Running")


def _not_preempted(admin: Client, ns: str) -> None:
    w = get_workload(admin, ns, "bob")
    assert w["status"]["phase"] == "Running"
    assert not any(c["type"] == "Preempted" for c in w["status"].get("conditions") or ())


# ------------------------------------------------------------ 1. priority


def test_a_tenant_chosen_priority_preempts_nobody_in_another_namespace(
        controller: Running, tenant: Client, admin: Client, group: NodeGroup,
        namespace: str, team_b: str) -> None:
    _bob_runs(admin, controller, group, team_b)
    tenant.create(workload("a11b", namespace, schedulingStrategy="priority",
                           priority=1_000_000_000, gpusPerReplica=2,
                           nodeSelector=group.selector))
    cond = wait_condition(admin, namespace, "a11b", "Scheduled", "Unschedulable")
    assert "preempting" not in cond["message"]
    _not_preempted(admin, team_b)


def test_an_admins_namespace_ceiling_refuses_a_higher_priority(
        tenant: Client, admin: Client, namespace: str) -> None:
    admin.patch("v1", "Namespace", namespace,
                {"metadata": {"labels": {MAX_PRIORITY_LABEL: "100"}}})

    def refused() -> bool:  # the policy sees the label once its informer has
        try:
            tenant.create(workload("hi", namespace, priority=1_000_000_000))
        except errors.Forbidden as e:
            assert ("priority 1000000000 is above this namespace's ceiling of 100 "
                    f"(namespace label {MAX_PRIORITY_LABEL}, set by an admin)") in str(e)
            return True
        tenant.delete(API_VERSION, "GPUWorkload", "hi", namespace=namespace)
        return False
    eventually(refused, timeout=30, what="a priority above the ceiling refused")
    tenant.create(workload("at", namespace, priority=100))
    tenant.create(workload("named", namespace, priority="high"))
    # the tenant cannot raise its own ceiling
    with pytest.raises(errors.Forbidden):
        tenant.patch("v1", "Namespace", namespace,
                     {"metadata": {"labels": {MAX_PRIORITY_LABEL: "1000000000"}}})


def test_only_a_priority_class_an_admin_made_preempts_across_namespaces(
        controller: Running, tenant: Client, admin: Client, group: NodeGroup,
        namespace: str, team_b: str, priority_class: str) -> None:
    def refused() -> bool:  # the class reaches the policy's params through an informer
        try:
            tenant.create(workload("off", namespace, priorityClassName=priority_class,
                                   priority=999))
        except errors.Invalid as e:
            assert (f"priorityClassName {priority_class} has the value 1000: spec.priority "
                    "must be 1000 (it is 999)") in str(e)
            return True
        tenant.delete(API_VERSION, "GPUWorkload", "off", namespace=namespace)
        return False
    eventually(refused, timeout=30, what="a priority other than its class's refused")
    _bob_runs(admin, controller, group, team_b)
    tenant.create(workload("a", namespace, schedulingStrategy="priority",
                           priorityClassName=priority_class, priority=1000,
                           gpusPerReplica=2, nodeSelector=group.selector))
    wait_condition(admin, team_b, "bob", "Preempted", "Preempted", timeout=60)
    wait_phase(admin, namespace, "a", "Running", timeout=60)
    (pod,) = pods_of(admin, namespace, "a")
    assert pod["spec"]["priorityClassName"] == priority_class
    assert pod["spec"]["priority"] == 1000


# ------------------------------------------------------------ 2. devices annotation


def test_a_tenant_cannot_edit_a_pods_devices(
        controller: Running, tenant: Client, admin: Client, group: NodeGroup,
        namespace: str) -> None:
    node, = controller.wait_nodes(group.add(1, gpus=4))
    tenant.create(workload("a2", namespace, gpusPerReplica=1, nodeSelector=group.selector))
    wait_phase(admin, namespace, "a2", "Running")
    (pod,) = pods_of(admin, namespace, "a2")
    name, before = pod["metadata"]["name"], pod["metadata"]["annotations"][DEVICES_ANNOTATION]
    for value in ("0,1,2,3", None):
        with pytest.raises(errors.Forbidden, match=f"the {DEVICES_ANNOTATION} annotation of "
                                                   "a pod cannot be added, changed or removed"):
            tenant.patch("v1", "Pod", name, {"metadata": {"annotations": {
                DEVICES_ANNOTATION: value}}}, namespace=namespace)
    assert admin.get("v1", "Pod", name, namespace)["metadata"]["annotations"][
        DEVICES_ANNOTATION] == before
    # what slips through (an admin is not matched by the policy) books nothing more
    admin.patch("v1", "Pod", name, {"metadata": {"annotations": {
        DEVICES_ANNOTATION: "0,1,2,3"}}}, namespace=namespace)
    state = controller.reconciler.ensure_state()

    def held() -> list[int]:
        return [d for d in range(4) if state.view().holder(node, d)]
    eventually(lambda: any(e["reason"] == "BadAnnotation" and "it keeps holding" in
                           e["message"] for e in events_for(admin, namespace, name)),
               timeout=30, what="the edit reported")
    assert held() == [int(before)]


def test_a_tenant_cannot_write_a_pods_group_slots(tenant: Client, admin: Client,
                                                  namespace: str) -> None:
    """A pod group leader's slots annotation reserves devices for its workers and is
    booked again after a restart: a tenant who wrote it (on a pod it creates, or on
    its bound leader) would reserve free GPUs."""
    slots = {GROUP_SLOTS_ANNOTATION: "1=node1:0,1"}
    with pytest.raises(errors.Forbidden, match=f"the {GROUP_SLOTS_ANNOTATION} annotation of "
                                               "a pod is written by the pod binding alone"):
        tenant.create(_bare_pod("slots", namespace, annotations=slots))
    tenant.create(_bare_pod("plain", namespace))
    with pytest.raises(errors.Forbidden, match=f"the {GROUP_SLOTS_ANNOTATION} annotation"):
        tenant.patch("v1", "Pod", "plain", {"metadata": {"annotations": slots}},
                     namespace=namespace)
    assert GROUP_SLOTS_ANNOTATION not in (
        admin.get("v1", "Pod", "plain", namespace)["metadata"].get("annotations") or {})


# ------------------------------------------------------------ 3. bare pods


def _bare_pod(name: str, ns: str, *, annotations: dict[str, str] | None = None,
              env: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "x"}
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [c], **spec}}


@pytest.mark.parametrize("annotations, env", [
    ({DEVICES_ANNOTATION: "0,1"}, None),
    (None, {"CUDA_VISIBLE_DEVICES": "0,1"}),
    (None, {"NVIDIA_VISIBLE_DEVICES": "all"}),
    ({DEVICES_ANNOTATION: "0,1"}, {"CUDA_VISIBLE_DEVICES": "0,1"}),
])
def test_a_tenant_cannot_give_a_pod_devices(
        tenant: Client, admin: Client, group: NodeGroup, namespace: str,
        annotations: dict | None, env: dict | None) -> None:
    node, = group.add(1, gpus=4)
    with pytest.raises(errors.Forbidden, match=ONLY_OURS):
        tenant.create(_bare_pod("p", namespace, annotations=annotations, env=env,
                                nodeName=node))
    with pytest.raises(errors.Forbidden, match=ONLY_OURS):  # unbound: the same
        tenant.create(_bare_pod("q", namespace, annotations=annotations, env=env))
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "j", "namespace": namespace},
           "spec": {"template": {
               "metadata": {"annotations": annotations or {}},
               "spec": {**_bare_pod("x", namespace, env=env)["spec"],
                        "restartPolicy": "Never"}}}}
    with pytest.raises(errors.Forbidden, match=ONLY_OURS):
        tenant.create(job)
    assert not admin.list("v1", "Pod", namespace=namespace)["items"]


def test_a_seed_pod_may_carry_only_what_its_map_names(
        tenant: Client, namespace: str) -> None:
    """The seed path: the webhook writes the annotation and env from the map."""
    seed = {"schedulerName": "gpu-scheduler"}
    tenant.create(_bare_pod("s-0", namespace, annotations={
        "gpu-scheduling-map": "0=node1:2,3", DEVICES_ANNOTATION: "2,3"},
        env={"CUDA_VISIBLE_DEVICES": "2,3"}, **seed))
    with pytest.raises(errors.Forbidden, match=ONLY_OURS):
        tenant.create(_bare_pod("s-1", namespace, annotations={
            "gpu-scheduling-map": "1=node1:2", DEVICES_ANNOTATION: "0,1,2,3"}, **seed))


# ------------------------------------------------------------ without the policy


@pytest.fixture
def evicting(installed: ControlPlane) -> Iterator[Running]:
    run = Running(installed, evict_conflicting_pods=True).start()
    yield run
    run.stop()


def test_a_pod_that_slipped_through_is_evicted(
        evicting: Running, admin: Client, group: NodeGroup, namespace: str) -> None:
    """As a cluster without the policy would let it (an admin is not matched): the
    manager asks the pod to go, with an Event saying why."""
    node, = evicting.wait_nodes(group.add(1, gpus=4))
    admin.create(_bare_pod("intruder", namespace, annotations={DEVICES_ANNOTATION: "0,1"},
                           nodeName=node))

    def told() -> bool:
        return any(e["reason"] == "UnauthorizedDevices" and
                   "was not set by gpu-orchestrator" in e["message"]
                   for e in events_for(admin, namespace, "intruder"))
    eventually(told, timeout=30, what="UnauthorizedDevices Event")

    def gone() -> bool:
        try:
            return bool(admin.get("v1", "Pod", "intruder", namespace)["metadata"]
                        .get("deletionTimestamp"))
        except NotFound:
            return True
    eventually(gone, timeout=30, what="the intruder evicted")


def test_an_admin_may_trust_an_infrastructure_namespace(
        tenant: Client, admin: Client, namespace: str) -> None:
    """The GPU operator's device plugin and DCGM exporter set
    NVIDIA_VISIBLE_DEVICES=all: an admin labels their namespace, a tenant cannot."""
    from api.v1alpha1.pod_devices import TRUSTED, TRUSTED_NAMESPACE_LABEL

    with pytest.raises(errors.Forbidden):
        tenant.patch("v1", "Namespace", namespace,
                     {"metadata": {"labels": {TRUSTED_NAMESPACE_LABEL: TRUSTED}}})
    admin.patch("v1", "Namespace", namespace,
                {"metadata": {"labels": {TRUSTED_NAMESPACE_LABEL: TRUSTED}}})

    def admitted() -> bool:
        try:
            tenant.create(_bare_pod("dcgm", namespace, env={"NVIDIA_VISIBLE_DEVICES": "all"}))
        except errors.Forbidden:
            return False
        return True
    eventually(admitted, timeout=30, what="a pod with device env admitted when trusted")
