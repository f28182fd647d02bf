"""Issue 25, item 7, on the local control plane with config/ installed (RBAC and the
admission policies enforced by kube-apiserver): a tenant (``edit`` in its namespace)
cannot change its queue's quota, cannot spend another team's queue, and cannot go
around its queue with pods that request ``nvidia.com/gpu`` (docs/security.md)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.v1alpha1.policies import MANAGER_SERVICE_ACCOUNT
from api.v1alpha1.queue_policies import JOB_CONTROLLER_USERS
from api.v1alpha1.types import API_VERSION
from runtime import Client, errors
from tests.integration.controller.conftest import Running, wait_condition, workload
from tests.integration.controller.test_tenant_isolation import _sa_groups
from tests.waiting import eventually

GPU_LABEL = "gpu.orchestrator.dev/workload"


def _queue(name: str, namespace: str, nominal: int = 4) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GPUQueue", "metadata": {"name": name},
            "spec": {"nominalGPUs": nominal, "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}}}}


@pytest.fixture
def queues(admin: Client) -> Iterator[Callable[[str, str], str]]:
    """``make(name, namespace)``: a GPUQueue selecting ``namespace``, deleted after."""
    made: list[str] = []
    tag = uuid.uuid4().hex[:6]

    def make(name: str, namespace: str) -> str:
        full = f"{name}-{tag}"
        admin.create(_queue(full, namespace))
        made.append(full)
        return full
    yield make
    for name in made:
        admin.delete(API_VERSION, "GPUQueue", name)


def _pod(name: str, ns: str, gpus: str | None, *, init: bool = False,
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "x"}
    if gpus is not None:
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    spec["initContainers" if init else "containers"] = [c]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": spec}


def _refused_eventually(create: Callable[[], Any], match: str, cleanup: Callable[[], Any],
                        what: str) -> None:
    """The policies read the marks the manager writes on a queue's namespaces: retry
    until it has written them."""
    def refused() -> bool:
        try:
            create()
        except errors.Forbidden as e:
            assert match in str(e), str(e)
            return True
        cleanup()
        return False
    eventually(refused, timeout=30, what=what)


def test_a_tenant_cannot_change_or_create_a_queue(tenant: Client, admin: Client,
                                                  namespace: str, queues: Any) -> None:
    mine = queues("mine", namespace)
    with pytest.raises(errors.Forbidden):
        tenant.patch(API_VERSION, "GPUQueue", mine, {"spec": {"nominalGPUs": 1000}})
    with pytest.raises(errors.Forbidden):
        tenant.create(_queue(f"{mine}-more", namespace, nominal=1000))
    with pytest.raises(errors.Forbidden):
        tenant.delete(API_VERSION, "GPUQueue", mine)
    assert admin.get(API_VERSION, "GPUQueue", mine)["spec"]["nominalGPUs"] == 4


def test_a_tenant_cannot_name_another_teams_queue(controller: Running, tenant: Client,
                                                  admin: Client, namespace: str,
                                                  queues: Any) -> None:
    """Refused once the manager marked the namespace (controllers/queues/marks.py)."""
    other_ns = f"other-{uuid.uuid4().hex[:6]}"
    admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other_ns}})
    try:
        theirs = queues("theirs", other_ns)
        mine = queues("mine", namespace)
        _refused_eventually(
            lambda: tenant.create(workload("steal", namespace, gpusPerReplica=1,
                                           queueName=theirs)),
            f"GPUQueue {theirs} does not admit namespace {namespace}",
            lambda: tenant.delete(API_VERSION, "GPUWorkload", "steal", namespace=namespace),
            "a workload naming another team's queue refused")
        tenant.create(workload("own", namespace, gpusPerReplica=1, queueName=mine))
        tenant.create(workload("default", namespace, gpusPerReplica=1))
    finally:
        admin.delete("v1", "Namespace", other_ns)


def test_the_gate_refuses_a_queue_that_came_to_not_select_the_namespace(
        controller: Running, tenant: Client, admin: Client, namespace: str) -> None:
    """Admission cannot judge a queue that does not exist yet; the gate does, once it
    does: the workload waits, saying why."""
    name = f"later-{uuid.uuid4().hex[:6]}"
    tenant.create(workload("early", namespace, gpusPerReplica=1, queueName=name))
    wait_condition(admin, namespace, "early", "Scheduled", "QueueNotFound")
    admin.create(_queue(name, "kube-system"))
    try:
        cond = wait_condition(admin, namespace, "early", "Scheduled", "QueueNotAllowed")
        assert cond["message"] == (f"GPUQueue {name} does not admit namespace {namespace} "
                                   "(its namespaceSelector)")
        assert (admin.get(API_VERSION, "GPUWorkload", "early", namespace)["status"]
                .get("phase")) == "Pending"
    finally:
        admin.delete(API_VERSION, "GPUQueue", name)


def test_a_plain_gpu_pod_cannot_escape_its_namespaces_queue(
        controller: Running, tenant: Client, admin: Client, namespace: str,
        queues: Any) -> None:
    # no queue selects the namespace yet: a GPU pod is the tenant's business
    tenant.create(_pod("before", namespace, "1"))
    queue = queues("q", namespace)
    _refused_eventually(
        lambda: tenant.create(_pod("gpu", namespace, "1")),
        f"namespace {namespace} is in GPUQueue {queue}: a pod may not request nvidia.com/gpu",
        lambda: tenant.delete("v1", "Pod", "gpu", namespace=namespace),
        "a GPU pod refused in a queue's namespace")
    with pytest.raises(errors.Forbidden, match="outside the queue"):
        tenant.create(_pod("init", namespace, "2", init=True))
    # what a Deployment or a tenant's Job would do: their pods come from a controller
    rs = admin.impersonate("system:serviceaccount:kube-system:replicaset-controller",
                           _sa_groups("system:serviceaccount:kube-system:replicaset-controller"))
    with pytest.raises(errors.Forbidden, match="outside the queue"):
        rs.create(_pod("from-rs", namespace, "1"))
    # our own: the manager's pods, and the job controller's from a Job of ours
    manager = admin.impersonate(MANAGER_SERVICE_ACCOUNT, _sa_groups(MANAGER_SERVICE_ACCOUNT))
    manager.create(_pod("ours", namespace, "1"))
    jobs = admin.impersonate(JOB_CONTROLLER_USERS[0], _sa_groups(JOB_CONTROLLER_USERS[0]))
    jobs.create(_pod("ours-job-0", namespace, "1", labels={GPU_LABEL: "w"}))
    with pytest.raises(errors.Forbidden, match="outside the queue"):
        jobs.create(_pod("their-job-0", namespace, "1"))
    # pods without GPUs, or with 0, are not the queue's business
    tenant.create(_pod("cpu", namespace, None))
    tenant.create(_pod("zero", namespace, "0"))


def test_a_tenant_cannot_make_a_job_look_like_ours(tenant: Client, admin: Client,
                                                   namespace: str) -> None:
    def job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"suspend": True, "template": {
                    "metadata": {"labels": {GPU_LABEL: "w"} if labels is None else labels},
                    "spec": {"restartPolicy": "Never",
                             "containers": [{"name": "c", "image": "x"}]}}}}
    with pytest.raises(errors.Forbidden, match=f"the pod template label {GPU_LABEL}"):
        tenant.create(job("forged"))
    # nor add the label later (a suspended Job's template labels may change)
    tenant.create(job("plain", labels={"app": "x"}))
    with pytest.raises(errors.Forbidden, match=f"the pod template label {GPU_LABEL}"):
        tenant.patch("batch/v1", "Job", "plain", {"spec": {"template": {"metadata": {
            "labels": {GPU_LABEL: "w"}}}}}, namespace=namespace)
    manager = admin.impersonate(MANAGER_SERVICE_ACCOUNT, _sa_groups(MANAGER_SERVICE_ACCOUNT))
    manager.create(job("ours"))
    # an update of our Job that keeps the label (the garbage collector's) goes through
    tenant.patch("batch/v1", "Job", "ours", {"metadata": {"annotations": {"a": "b"}}},
                 namespace=namespace)
