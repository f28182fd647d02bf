"""The marks the queue admission policies read (controllers/queues/marks.py), on the
local control plane with config/ installed: the manager marks a namespace when a
GPUQueue comes to select it and unmarks it when none does; only the manager (or a
cluster admin) writes the marks. And two queues selecting one namespace: the one
that loses it says so, and a workload waiting in the other is told."""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import QUEUED_LABEL, QUEUES_ANNOTATION
from api.v1alpha1.types import API_VERSION
from runtime import Client, errors
from tests.integration.controller.conftest import (
    Running,
    events_for,
    wait_condition,
    workload,
)
from tests.waiting import eventually, watched


def _selector(namespace: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": namespace}}


@pytest.fixture
def queues(admin: Client) -> Iterator[Callable[..., str]]:
    """``make(prefix, selector, nominal)``: a GPUQueue named ``<prefix>-<tag>``,
    deleted afterwards."""
    made: list[str] = []
    tag = uuid.uuid4().hex[:6]

    def make(prefix: str, selector: dict[str, Any] | None, nominal: int = 4) -> str:
        name = f"{prefix}-{tag}"
        spec: dict[str, Any] = {"nominalGPUs": nominal}
        if selector is not None:
            spec["namespaceSelector"] = selector
        admin.create({"apiVersion": API_VERSION, "kind": "GPUQueue",
                      "metadata": {"name": name}, "spec": spec})
        made.append(name)
        return name
    yield make
    for name in made:
        with contextlib.suppress(errors.NotFound):
            admin.delete(API_VERSION, "GPUQueue", name)


def _marks(admin: Client, namespace: str) -> tuple[str | None, str | None]:
    md = admin.get("v1", "Namespace", namespace)["metadata"]
    return (md.get("labels") or {}).get(QUEUED_LABEL), \
        (md.get("annotations") or {}).get(QUEUES_ANNOTATION)


def _wait_marks(admin: Client, namespace: str, want: tuple[str | None, str | None]) -> None:
    def check(ns: dict[str, Any]) -> bool:
        md = ns["metadata"]
        return ((md.get("labels") or {}).get(QUEUED_LABEL),
                (md.get("annotations") or {}).get(QUEUES_ANNOTATION)) == want
    watched(admin, "v1", "Namespace", None, namespace, check, timeout=30,
            what=f"namespace {namespace} marked {want}")


def _gpu_pod(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "gpu-", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {
                "limits": {"nvidia.com/gpu": "1"}}}]}}


def test_the_marks_follow_the_queues_and_hold_a_tenants_gpu_pods(
        controller: Running, tenant: Client, admin: Client, namespace: str,
        queues: Callable[..., str]) -> None:
    tenant.create(_gpu_pod(namespace), dry_run=True)  # no queue: the tenant's business
    b = queues("b", None)  # selects nothing yet
    t0 = time.monotonic()
    a = queues("a", _selector(namespace))
    _wait_marks(admin, namespace, ("true", a))
    print(f"namespace marked {time.monotonic() - t0:.2f}s after its GPUQueue's create",
          file=sys.stderr)
    # the policies read the Namespace from kube-apiserver's own cache, which may show
    # the marks a moment after a watch does: each answer is waited for
    _eventually_answers(tenant, _gpu_pod(namespace), f"namespace {namespace} is in GPUQueue "
                        f"{a}: a pod may not request nvidia.com/gpu here outside the queue")
    _eventually_answers(tenant, workload("w", namespace, gpusPerReplica=1,
                                         queueName="elsewhere"),
                        f"GPUQueue elsewhere does not admit namespace {namespace} "
                        f"(the GPUQueues that select it: {a})")
    # b comes to select it too: both, by name
    admin.patch(API_VERSION, "GPUQueue", b, {"spec": {"namespaceSelector": _selector(namespace)}})
    _wait_marks(admin, namespace, ("true", f"{a},{b}"))
    _eventually_answers(tenant, workload("w", namespace, gpusPerReplica=1, queueName=b), "")
    # a no longer does; then b is deleted: unmarked, a GPU pod is the tenant's again
    admin.patch(API_VERSION, "GPUQueue", a, {"spec": {"namespaceSelector": _selector("other")}})
    _wait_marks(admin, namespace, ("true", b))
    admin.delete(API_VERSION, "GPUQueue", b)
    _wait_marks(admin, namespace, (None, None))
    _eventually_answers(tenant, _gpu_pod(namespace), "")


def _answer(client: Client, obj: dict[str, Any]) -> str:
    """What a dry-run create of ``obj`` is told: "" when admitted, else the refusal."""
    try:
        client.create(obj, dry_run=True)
    except errors.Forbidden as exc:
        return str(exc) or "Forbidden"
    return ""


def _eventually_answers(client: Client, obj: dict[str, Any], refusal: str) -> None:
    """A dry-run create of ``obj`` comes to be refused with ``refusal`` in its
    message ("": comes to be admitted)."""
    def answered() -> bool:
        got = _answer(client, obj)
        return refusal in got if refusal else got == ""
    eventually(answered, timeout=15, what=f"the answer {refusal or 'admitted'!r}")


def test_only_the_manager_writes_the_marks(controller: Running, admin: Client,
                                           namespace: str, queues: Callable[..., str]) -> None:
    """Namespaces are an admin's (a tenant cannot write them); a user who may (a
    namespace provisioner, say) still cannot forge, change or drop the marks."""
    provisioner = admin.impersonate(f"provisioner-{uuid.uuid4().hex[:6]}",
                                    ["system:authenticated", "ns-writers"])
    admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                  "metadata": {"name": "test-namespace-writer"},
                  "rules": [{"apiGroups": [""], "resources": ["namespaces"],
                             "verbs": ["get", "patch", "update"]}]})
    admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                  "metadata": {"name": "test-namespace-writer"},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                              "name": "test-namespace-writer"},
                  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                "name": "ns-writers"}]})
    try:
        def patch(labels: dict[str, Any], annotations: dict[str, Any] | None = None) -> None:
            eventually(lambda: _try_patch(provisioner, namespace, labels, annotations),
                       timeout=30, what="the provisioner's RBAC in force")

        with pytest.raises(errors.Forbidden, match=f"the label {QUEUED_LABEL} and the "
                           f"annotation {QUEUES_ANNOTATION} of a Namespace are written only "
                           "by the gpu-orchestrator manager"):
            patch({QUEUED_LABEL: "true"})
        patch({"team": "a"})  # its own labels: as before
        a = queues("a", _selector(namespace))
        _wait_marks(admin, namespace, ("true", a))
        for labels, annotations in (({QUEUED_LABEL: None}, None),
                                    ({}, {QUEUES_ANNOTATION: "someone-else"})):
            with pytest.raises(errors.Forbidden, match="written only by the gpu-orchestrator"):
                patch(labels, annotations)
        assert _marks(admin, namespace) == ("true", a)
        # the manager itself may change nothing else of a Namespace
        from api.v1alpha1.policies import MANAGER_SERVICE_ACCOUNT
        from tests.integration.controller.test_tenant_isolation import _sa_groups
        manager = admin.impersonate(MANAGER_SERVICE_ACCOUNT, _sa_groups(MANAGER_SERVICE_ACCOUNT))
        with pytest.raises(errors.Forbidden, match="the gpu-orchestrator manager changes only"):
            manager.patch("v1", "Namespace", namespace, {"metadata": {"labels": {"team": "b"}}})
    finally:
        admin.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "test-namespace-writer")
        admin.delete("rbac.authorization.k8s.io/v1", "ClusterRole", "test-namespace-writer")


def _try_patch(c: Client, namespace: str, labels: dict[str, Any],
               annotations: dict[str, Any] | None) -> bool:
    md: dict[str, Any] = {"labels": labels}
    if annotations is not None:
        md["annotations"] = annotations
    try:
        c.patch("v1", "Namespace", namespace, {"metadata": md})
    except errors.Forbidden as e:
        if "cannot patch resource" in str(e):  # RBAC not in force yet
            return False
        raise
    return True


def test_the_queue_that_loses_a_namespace_says_so_and_the_waiting_workload_is_told(
        controller: Running, admin: Client, namespace: str,
        queues: Callable[..., str]) -> None:
    """Two queues select one namespace: the first by name is its workloads' default.
    With nominalGPUs 0 and no cohort, they would wait there for ever, saying nothing
    of the other queue."""
    first = queues("a", _selector(namespace), nominal=0)
    second = queues("b", _selector(namespace), nominal=8)
    admin.create(workload("w", namespace, gpusPerReplica=1))
    cond = wait_condition(admin, namespace, "w", "Scheduled", "WaitingForQuota")
    assert cond["message"].endswith(
        f"; namespace {namespace} is also selected by GPUQueue {second}: a workload without "
        f"spec.queueName goes to {first}, the first by name; set spec.queueName to use "
        "another"), cond["message"]

    def overlapping(q: dict[str, Any]) -> dict[str, Any] | None:
        return next((c for c in (q.get("status") or {}).get("conditions") or ()
                     if c["type"] == "Overlapping"), None)
    cond = watched(admin, API_VERSION, "GPUQueue", None, second, overlapping, timeout=30,
                   what=f"GPUQueue {second} Overlapping")
    message = (f"namespace {namespace} is also selected by GPUQueue {first}, which comes "
               "first by name: their workloads without spec.queueName go there; they use "
               f"this queue only with spec.queueName: {second}")
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "True", "AnotherQueueFirst", message)
    assert overlapping(admin.get(API_VERSION, "GPUQueue", first)) is None
    eventually(lambda: any(e["reason"] == "AnotherQueueFirst" and e["message"] == message
                           for e in events_for(admin, "default", second)),
               timeout=30, what=f"an AnotherQueueFirst Event on GPUQueue {second}")
