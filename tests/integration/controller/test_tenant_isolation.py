"""Issue 16 on the local control plane: each attack, tried as a hostile tenant (a user
bound to the built-in ``edit`` role, which our aggregated roles extend), as a node's
agent (its token bound to one node) or as the manager, is refused with a clear
message or changes nothing. Everything in config/ is installed (RBAC on, the
admission policies of config/crd enforced by kube-apiserver).

What the controller core does with what gets through (forged placements, ownership
by UID, total exposure) is tested with the core, not here."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.policies import (
    AGENT_SERVICE_ACCOUNT,
    ANNOTATION_MAP_FORBIDDEN,
    ANNOTATION_MAP_NAMESPACE_LABEL,
    MANAGER_SERVICE_ACCOUNT,
    NODE_NAME_EXTRA,
)
from api.v1alpha1.types import API_VERSION
from controllers.podbinding.controller import PodBindingOptions
from hack.testenv import ControlPlane
from runtime import Client, NotFound, RestConfig, errors
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    cleanup_gpunodes,
    events_for,
    workload,
)
from tests.waiting import eventually

SA_GROUPS = ["system:serviceaccounts", "system:authenticated"]


def _sa_groups(user: str) -> list[str]:
    ns = user.split(":")[2]
    return [*SA_GROUPS, f"system:serviceaccounts:{ns}"]


def agent_of(admin: Client, node: str | None) -> Client:
    """The agent's service account with a token bound to a pod on ``node``."""
    extra = {NODE_NAME_EXTRA: [node]} if node else None
    return admin.impersonate(AGENT_SERVICE_ACCOUNT, _sa_groups(AGENT_SERVICE_ACCOUNT), extra)


def gpunode(name: str, devices: int, node_name: str | None = None) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GPUNode", "metadata": {"name": name},
            "spec": {"nodeName": node_name or name},
            "status": {"deviceCount": devices,
                       "devices": [{"index": i, "uuid": f"GPU-{name}-{i}"}
                                   for i in range(devices)]}}


def status_patch(devices: list[int]) -> dict[str, Any]:
    return {"status": {"deviceCount": len(devices),
                       "devices": [{"index": i, "uuid": f"GPU-{i}"} for i in devices]}}


def assert_no_device_held_twice(admin: Client) -> None:
    """The issue's invariant, over the whole cluster: no (node, device) is named by
    live pods of two different owners (one owner's own map may share a device)."""
    holders: dict[tuple[str, int], set[str]] = {}
    for p in admin.list("v1", "Pod")["items"]:
        meta, spec = p["metadata"], p["spec"]
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        devices = (meta.get("annotations") or {}).get("gpu.orchestrator.dev/devices")
        if not devices or not spec.get("nodeName"):
            continue
        owner = next((r["uid"] for r in meta.get("ownerReferences") or ()
                      if r.get("controller")), meta["uid"])
        for d in devices.split(","):
            holders.setdefault((spec["nodeName"], int(d)), set()).add(owner)
    shared = {k: v for k, v in holders.items() if len(v) > 1}
    assert not shared, f"devices held by pods of different owners: {shared}"


# ------------------------------------------------------------ 1. forged placements


def test_a_tenant_may_not_write_status(tenant: Client, admin: Client, namespace: str) -> None:
    """Attack 1: the tenant may create a workload but never write its status."""
    tenant.create(workload("w", namespace, gpusPerReplica=1))
    forged = {"status": {"placements": [{"index": 0, "node": "node1", "devices": [0, 1]}]}}
    with pytest.raises(errors.Forbidden, match="gpuworkloads/status"):
        tenant.patch(API_VERSION, "GPUWorkload", "w", forged, namespace=namespace,
                     subresource="status")
    w = admin.get(API_VERSION, "GPUWorkload", "w", namespace)
    assert not (w.get("status") or {}).get("placements")
    # ...nor touch GPUNodes or Nodes
    with pytest.raises(errors.Forbidden):
        tenant.create(gpunode(f"t-{uuid.uuid4().hex[:6]}", 16))
    with pytest.raises(errors.Forbidden):
        tenant.patch("v1", "Node", "node1", {"metadata": {"labels": {"mine": "true"}}})


# ------------------------------------------------------------ 3. GPUNodes


def test_a_gpunode_naming_another_node_is_refused(admin: Client) -> None:
    """Attack 3: even an admin cannot make GPUNode ``evil`` describe node1."""
    name = f"evil-{uuid.uuid4().hex[:6]}"
    with cleanup_gpunodes(admin, name), pytest.raises(
            errors.Invalid, match=re.escape("spec.nodeName must equal metadata.name")):
        admin.create(gpunode(name, 16, node_name="node1"))


def test_an_agent_writes_only_its_own_nodes_gpunode(admin: Client, group: NodeGroup) -> None:
    mine, other = group.add(2, gpus=4)
    agent = agent_of(admin, mine)
    with cleanup_gpunodes(admin, mine, other):
        agent.create(gpunode(mine, 4))
        agent.patch(API_VERSION, "GPUNode", mine, status_patch([0, 1, 2, 3]),
                    subresource="status")
        with pytest.raises(errors.Forbidden,
                           match=f"bound to node {mine} may write only the GPUNode of that "
                                 f"node, not {other}"):
            agent.create(gpunode(other, 4))
        admin.create(gpunode(other, 4))
        admin.patch(API_VERSION, "GPUNode", other, status_patch([0, 1, 2, 3]),
                    subresource="status")
        with pytest.raises(errors.Forbidden, match=f"not {other}"):
            agent.patch(API_VERSION, "GPUNode", other, status_patch([0]),
                        subresource="status")
        # the agent's account with a token bound to no node writes nothing
        with pytest.raises(errors.Forbidden, match="only with a token bound to its pod"):
            agent_of(admin, None).patch(API_VERSION, "GPUNode", mine, status_patch([0]),
                                        subresource="status")
        assert len(admin.get(API_VERSION, "GPUNode", other)["status"]["devices"]) == 4


def test_an_agent_cannot_report_more_devices_than_its_node_has(
        admin: Client, group: NodeGroup) -> None:
    """Attack 3: 16 devices on a 4-GPU node (status is written through /status: a
    create drops it, so the bound is checked where devices are reported)."""
    node, = group.add(1, gpus=4)
    agent = agent_of(admin, node)
    with cleanup_gpunodes(admin, node):
        agent.create(gpunode(node, 16))
        assert not admin.get(API_VERSION, "GPUNode", node).get("status")
        for devices in (list(range(16)), [0, 1, 2, 3, 4], [7]):
            with pytest.raises(errors.Invalid, match=re.escape(
                    "beyond its Node's nvidia.com/gpu capacity of 4")):
                agent.patch(API_VERSION, "GPUNode", node, status_patch(devices),
                            subresource="status")
        agent.patch(API_VERSION, "GPUNode", node, status_patch([0, 1, 2, 3]),
                    subresource="status")
        assert len(admin.get(API_VERSION, "GPUNode", node)["status"]["devices"]) == 4


def test_an_agent_changes_only_its_own_nodes_gpu_labels(
        admin: Client, group: NodeGroup) -> None:
    mine, other = group.add(2, gpus=4)
    agent = agent_of(admin, mine)
    agent.patch("v1", "Node", mine, {"metadata": {"labels": {
        "gpu.orchestrator.dev/gpu-count": "4"}}})
    with pytest.raises(errors.Forbidden, match=f"only the Node it runs on .*not {other}"):
        agent.patch("v1", "Node", other, {"metadata": {"labels": {
            "gpu.orchestrator.dev/gpu-count": "16"}}})
    with pytest.raises(errors.Forbidden, match=re.escape("only the gpu.orchestrator.dev/* labels")):
        agent.patch("v1", "Node", mine, {"metadata": {"labels": {"team": "mine"}}})
    with pytest.raises(errors.Forbidden, match=re.escape("only the gpu.orchestrator.dev/* labels")):
        agent.patch("v1", "Node", mine, {"spec": {"taints": [
            {"key": "reserved", "value": "me", "effect": "NoSchedule"}]}})
    labels = admin.get("v1", "Node", other)["metadata"]["labels"]
    assert "gpu.orchestrator.dev/gpu-count" not in labels


# ------------------------------------------------------------ 4. exposure


@pytest.mark.parametrize("kind", ["containers", "initContainers"])
def test_a_templates_own_gpu_request_is_refused_in_the_index_modes(
        tenant: Client, namespace: str, kind: str) -> None:
    """Attack 4: the device plugin would hand out GPUs the ledger never booked."""
    c = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    spec[kind] = [c]
    for exposure in (None, "cuda-visible-devices", "nvidia-visible-devices"):
        extra = {"deviceExposure": exposure} if exposure else {}
        with pytest.raises(errors.Invalid, match="the device plugin would hand the pod GPUs "
                                                 "the controller never booked"):
            tenant.create(workload("w", namespace, gpusPerReplica=1,
                                   template={"spec": spec}, **extra))
    tenant.create(workload("w", namespace, gpusPerReplica=1, template={"spec": spec},
                           deviceExposure="device-plugin"))


# ------------------------------------------------------------ 5. annotationMap


def test_an_admin_can_forbid_annotation_map_in_a_namespace(
        tenant: Client, admin: Client, namespace: str) -> None:
    admin.patch("v1", "Namespace", namespace, {"metadata": {"labels": {
        ANNOTATION_MAP_NAMESPACE_LABEL: ANNOTATION_MAP_FORBIDDEN}}})
    # the policy sees the label once its namespace informer has: retry until refused
    def refused() -> bool:
        try:
            tenant.create(workload("m", namespace, schedulingStrategy="annotationMap",
                                   schedulingMap="0=node1:0"))
        except errors.Forbidden as e:
            assert "annotationMap placements are forbidden in this namespace" in str(e)
            return True
        tenant.delete(API_VERSION, "GPUWorkload", "m", namespace=namespace)
        return False
    eventually(refused, timeout=30, what="annotationMap refused in a labelled namespace")
    with pytest.raises(errors.Forbidden, match="forbidden in this namespace"):
        tenant.create(workload("a", namespace, {"gpu-scheduling-map": "0=node1:0"}))
    with pytest.raises(errors.Forbidden, match="forbidden in this namespace"):
        tenant.create({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "p-0", "namespace": namespace,
                                    "annotations": {"gpu-scheduling-map": "0=node1:0"}},
                       "spec": {"schedulerName": "gpu-scheduler",
                                "containers": [{"name": "c", "image": "x"}]}})
    tenant.create(workload("ok", namespace, gpusPerReplica=1))


# ------------------------------------------------------------ 6. the manager's reach


def test_the_manager_never_writes_in_system_namespaces(admin: Client) -> None:
    manager = admin.impersonate(MANAGER_SERVICE_ACCOUNT, _sa_groups(MANAGER_SERVICE_ACCOUNT))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"x-{uuid.uuid4().hex[:6]}", "namespace": "kube-system"},
           "spec": {"containers": [{"name": "c", "image": "x"}]}}
    with pytest.raises(errors.Forbidden, match="does not write in kube-system"):
        manager.create(pod)


def test_the_manager_patches_only_a_workloads_finalizers(
        tenant: Client, admin: Client, namespace: str) -> None:
    tenant.create(workload("w", namespace, gpusPerReplica=1))
    manager = admin.impersonate(MANAGER_SERVICE_ACCOUNT, _sa_groups(MANAGER_SERVICE_ACCOUNT))
    with pytest.raises(errors.Forbidden, match="only a GPUWorkload's status"):
        # replicas: a field users may change (gpusPerReplica is refused to everyone)
        manager.patch(API_VERSION, "GPUWorkload", "w", {"spec": {"replicas": 2}},
                      namespace=namespace)
    with pytest.raises(errors.Forbidden, match="only a GPUWorkload's status"):
        manager.patch(API_VERSION, "GPUWorkload", "w",
                      {"metadata": {"labels": {"gpu.orchestrator.dev/workload": "other"}}},
                      namespace=namespace)
    manager.patch(API_VERSION, "GPUWorkload", "w",
                  {"metadata": {"finalizers": ["gpu.orchestrator.dev/test"]}},
                  namespace=namespace)
    manager.patch(API_VERSION, "GPUWorkload", "w", {"metadata": {"finalizers": None}},
                  namespace=namespace)
    w = admin.get(API_VERSION, "GPUWorkload", "w", namespace)
    assert w["spec"]["replicas"] == 1 and not w["metadata"].get("finalizers")


# ------------------------------------------------------------ 5. seed-path side doors


@pytest.fixture
def evicting_binder(installed: ControlPlane) -> Iterator[Running]:
    run = Running(installed, pod_binding=PodBindingOptions(
        max_backoff=5.0, evict_conflicting_pods=True)).start()
    yield run
    run.stop()


def test_a_pod_bound_by_someone_else_onto_held_devices_is_evicted(
        evicting_binder: Running, admin: Client, group: NodeGroup, namespace: str) -> None:
    node, = evicting_binder.wait_nodes(group.add(1, gpus=4))
    seed = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "holder-0", "namespace": namespace,
                         "annotations": {"gpu-scheduling-map": f"0={node}:0,1"}},
            "spec": {"schedulerName": "gpu-scheduler", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "x"}]}}
    admin.create(seed)
    eventually(lambda: admin.get("v1", "Pod", "holder-0", namespace)["spec"].get("nodeName"),
               timeout=30, what="holder-0 bound")
    intruder = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "intruder-0", "namespace": namespace,
                             "annotations": {"gpu.orchestrator.dev/devices": "0,1"}},
                "spec": {"schedulerName": "gpu-scheduler", "nodeName": node,
                         "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "c", "image": "x"}]}}
    admin.create(intruder)

    def conflict_reported() -> bool:
        return any(e["reason"] == "DeviceConflict" and "evicting it" in e["message"]
                   for e in events_for(admin, namespace, "intruder-0"))
    eventually(conflict_reported, timeout=30, what="DeviceConflict Event on the intruder")

    def evicted() -> bool:
        try:
            p = admin.get("v1", "Pod", "intruder-0", namespace)
        except NotFound:
            return True
        return bool(p["metadata"].get("deletionTimestamp"))
    eventually(evicted, timeout=30, what="the intruder evicted")
    eventually(lambda: assert_no_device_held_twice(admin) is None, timeout=30,
               what="no device held by two owners")
    state = evicting_binder.reconciler.ensure_state()
    view = state.view()
    held = {view.holder(node, d) for d in (0, 1)}
    assert held == {f"Pod:{namespace}/holder-0"}
    assert admin.get("v1", "Pod", "holder-0", namespace)["status"].get("phase") == "Running"


# ------------------------------------------------------------ helpers' own check


def test_impersonated_extra_reaches_the_api_server(admin: Client) -> None:
    """The agent tests above rest on the API server seeing the bound node."""
    me = agent_of(admin, "node1").create(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert me["status"]["userInfo"]["extra"][NODE_NAME_EXTRA] == ["node1"]


def test_a_real_token_of_the_agents_pod_is_bound_to_its_node(
        installed: ControlPlane, admin: Client, group: NodeGroup) -> None:
    """Not impersonation: kube-apiserver itself puts the node of the pod a token is
    bound to into the token's user, and the policies act on it."""
    mine, other = group.add(2, gpus=4)
    ns, sa = "gpu-orchestrator-system", AGENT_SERVICE_ACCOUNT.rsplit(":", 1)[1]
    pod = admin.create({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"agent-{mine}", "namespace": ns},
                        "spec": {"nodeName": mine, "serviceAccountName": sa,
                                 "automountServiceAccountToken": False,
                                 "terminationGracePeriodSeconds": 0,
                                 "containers": [{"name": "agent", "image": "x"}]}})
    try:
        req = admin.create_subresource("v1", "ServiceAccount", sa, "token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600, "boundObjectRef": {
                "apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"]}}}, namespace=ns)
        config = RestConfig(host=admin.config.host, ca_file=admin.config.ca_file,
                            token=req["status"]["token"])
        agent = Client(config)
        with cleanup_gpunodes(admin, mine, other):
            agent.create(gpunode(mine, 4))
            agent.patch(API_VERSION, "GPUNode", mine, status_patch([0, 1, 2, 3]),
                        subresource="status")
            with pytest.raises(errors.Forbidden, match=f"not {other}"):
                agent.create(gpunode(other, 4))
    finally:
        admin.delete("v1", "Pod", pod["metadata"]["name"], namespace=ns)


def test_a_manager_limited_to_namespaces_places_only_there(
        installed: ControlPlane, admin: Client, group: NodeGroup, namespace: str) -> None:
    """--namespaces: workloads elsewhere are left alone (config/namespaced gives the
    matching RBAC); pods everywhere are still counted."""
    other = f"t-{uuid.uuid4().hex[:8]}"
    admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    run = Running(installed, namespaces=frozenset({namespace})).start()
    try:
        run.wait_nodes(group.add(1, gpus=4))
        for ns in (other, namespace):
            admin.create(workload("w", ns, gpusPerReplica=1, nodeSelector=group.selector))

        def placed(ns: str) -> bool:
            w = admin.get(API_VERSION, "GPUWorkload", "w", ns)
            return bool((w.get("status") or {}).get("placements"))
        eventually(lambda: placed(namespace), timeout=30, what="the managed namespace placed")
        assert not placed(other)
        assert not admin.list("v1", "Pod", namespace=other)["items"]
    finally:
        run.stop()
        admin.delete("v1", "Namespace", other)
