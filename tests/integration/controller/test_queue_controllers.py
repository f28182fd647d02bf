"""A queued namespace as a cluster's controllers see it: kube-controller-manager runs
as kubeadm runs it, each controller with its own service account and none of them a
cluster admin (hack/testenv/identities.py). A tenant's Deployment that asks for
``nvidia.com/gpu`` in a namespace a GPUQueue selects gets no pod (its ReplicaSet says
why), while the Job of a Job-kind GPUWorkload still gets its pod from the Job
controller (docs/queues.md, Tenancy)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runtime import Client, errors
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    namespace_queue,
    wait_phase,
    workload,
)
from tests.waiting import eventually, watched

TEMPLATE = {"spec": {"terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "busybox:1.36"}]}}


@pytest.fixture
def queue(admin: Client, namespace: str) -> Iterator[str]:
    """A GPUQueue selecting ``namespace``, deleted afterwards."""
    with namespace_queue(admin, namespace, 4) as name:
        yield name


def _gpu_pod_spec() -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "busybox:1.36",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}


def _refusal(tenant: Client, namespace: str) -> str:
    """Waits until the queue holds the namespace (a tenant's own GPU pod is refused)
    and returns the refusal, less its ``pods "<name>" is forbidden:`` opening."""
    def refused() -> str | None:
        try:
            tenant.create({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "probe", "namespace": namespace},
                           "spec": _gpu_pod_spec()})
        except errors.Forbidden as e:
            return e.message.split(" is forbidden: ", 1)[-1]
        tenant.delete("v1", "Pod", "probe", namespace=namespace)
        return None
    return eventually(refused, timeout=30, what="the queue refuses a tenant's GPU pod")


def _deployment(name: str, namespace: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": _gpu_pod_spec()}}}


def _replica_failure(rs: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (rs.get("status") or {}).get("conditions") or ()
                 if c["type"] == "ReplicaFailure" and c["status"] == "True"), None)


def test_a_tenants_deployment_gets_no_gpu_pod_in_a_queued_namespace_our_job_does(
        controller: Running, tenant: Client, admin: Client, namespace: str, queue: str,
        group: NodeGroup) -> None:
    """Before kube-controller-manager ran on per-controller credentials it was a
    cluster admin here, whom the queue's admission lets through: the Deployment's
    GPU pod was created, as it never would be on a kubeadm cluster."""
    controller.wait_nodes(group.add(1, gpus=2))
    refusal = _refusal(tenant, namespace)

    tenant.create(_deployment("web", namespace))
    rs = eventually(lambda: tenant.list("apps/v1", "ReplicaSet", namespace=namespace,
                                        label_selector="app=web")["items"],
                    timeout=30, what="the Deployment's ReplicaSet")[0]
    failure = watched(tenant, "apps/v1", "ReplicaSet", namespace, rs["metadata"]["name"],
                      _replica_failure, timeout=60,
                      what="the ReplicaSet reports its pod refused")
    assert failure["reason"] == "FailedCreate", failure
    assert refusal in failure["message"], (refusal, failure)
    assert tenant.list("v1", "Pod", namespace=namespace,
                       label_selector="app=web")["items"] == []

    # ours: the Job controller makes the pod of a Job-kind GPUWorkload's Job, one that
    # requests nvidia.com/gpu (device-plugin exposure) as the Deployment's did
    tenant.create(workload("train", namespace, gpusPerReplica=1, workloadKind="Job",
                           deviceExposure="device-plugin", queueName=queue,
                           nodeSelector=group.selector, template=TEMPLATE))
    wait_phase(admin, namespace, "train", "Running", timeout=90)
    pod, = tenant.list("v1", "Pod", namespace=namespace, label_selector="job-name=train-0")[
        "items"]
    assert pod["spec"]["nodeName"] == group.names[0]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
