"""A Kubeflow TrainJob, run by the real Trainer v2.0.0 controller (our build of its
manager: hack/testenv/trainer) beside the real JobSet controller, as a user of a
ClusterTrainingRuntime whose pods say ``schedulerName: gpu-scheduler``: the TrainJob
becomes a JobSet, whose pods are one pod group (docs/podgroups.md), placed by the
manager's pod binding whole or not at all, each member on exact devices (the devices
annotation, and a CUDA_VISIBLE_DEVICES that the kubelet resolves to it).

Each test's nodes are its own kwok nodes (``NodeGroup``); the runtime's pods select
them."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from runtime import Client, NotFound, errors
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    group,
    installed,
)
from tests.integration.podgroups.conftest import REF
from tests.integration.podgroups.controllers import JOBSET, TRAINER
from tests.integration.podgroups.fixtures import (
    bound,
    found,
    members,
    named_nodes,
    peer_fixtures,
    told,
)
from tests.waiting import eventually

TRAINER_API = "trainer.kubeflow.org/v1alpha1"
DEVICES = "gpu.orchestrator.dev/devices"

# JobSet first: Trainer watches the JobSets it makes, so their kind must be served
peers, binder = peer_fixtures(JOBSET, TRAINER)


@pytest.fixture
def runtime(binder: Running, admin: Client, group: NodeGroup) -> Iterator[str]:  # noqa: F811
    """A ClusterTrainingRuntime of one trainer Job ("node", Trainer's own names) whose
    pods are for gpu-scheduler on ``group``'s nodes. Deleted at the end once its
    TrainJobs are (Trainer keeps a finalizer on a runtime in use)."""
    name = f"gpu-{uuid.uuid4().hex[:6]}"
    pod = {"schedulerName": "gpu-scheduler", "restartPolicy": "Never",
           "terminationGracePeriodSeconds": 0, "nodeSelector": dict(group.selector),
           "containers": [{"name": "node", "image": "trainer:1"}]}
    admin.create({"apiVersion": TRAINER_API, "kind": "ClusterTrainingRuntime",
                  "metadata": {"name": name},
                  "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {
                      "replicatedJobs": [{"name": "node", "template": {
                          "metadata": {"labels": {
                              "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                          "spec": {"backoffLimit": 0, "template": {"spec": pod}}}}]}}}})
    yield name
    for job in admin.list(TRAINER_API, "TrainJob")["items"]:
        if job["spec"]["runtimeRef"]["name"] == name:
            with contextlib.suppress(NotFound):
                admin.delete(TRAINER_API, "TrainJob", job["metadata"]["name"],
                             job["metadata"]["namespace"])
    admin.delete(TRAINER_API, "ClusterTrainingRuntime", name)
    eventually(lambda: found(admin, TRAINER_API, "ClusterTrainingRuntime", name) is None,
               timeout=60, what=f"ClusterTrainingRuntime {name} deleted")


def trainjob(name: str, runtime: str, nodes: int, gpus: int) -> dict[str, Any]:
    return {"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime}, "trainer": {
                "numNodes": nodes,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": str(gpus)}}}}}


def test_a_trainjob_is_one_group_placed_whole_on_exact_devices(
        runtime: str, binder: Running, exposure: None, admin: Client,  # noqa: F811
        namespace: str, group: NodeGroup) -> None:  # noqa: F811
    """4 nodes x 4 GPUs of a TrainJob on room for 3 (per-pod binding would bind 3 and
    hold 12 GPUs): the JobSet Trainer made has 4 members, none bound, each told why
    with its group's key; once a 4th node comes, all 4 are bound, one per node, each
    with its 4 devices in its annotation and CUDA_VISIBLE_DEVICES read from it."""
    nodes = binder.wait_nodes(named_nodes(group, 3))
    admin.create(trainjob("llm", runtime, nodes=4, gpus=4), namespace=namespace)
    js = eventually(lambda: found(admin, "jobset.x-k8s.io/v1alpha2", "JobSet", "llm", namespace),
                    timeout=60, what="the JobSet Trainer makes of the TrainJob")
    assert [(o["kind"], o["name"]) for o in js["metadata"]["ownerReferences"]] == [
        ("TrainJob", "llm")]
    waiting = eventually(lambda: (lambda ps: ps if len(ps) == 4 else None)(
        members(admin, namespace, "llm")), timeout=90, what="the TrainJob's 4 pods made")
    why = eventually(lambda: told(admin, namespace, waiting, "FailedScheduling", "pod group"),
                     timeout=60, what="a FailedScheduling Event naming the pod group")
    assert f"{namespace}/jobset:llm:0" in why and "4 of 4 members to place" in why, why
    assert bound(members(admin, namespace, "llm")) == []

    nodes += binder.wait_nodes(named_nodes(group, 1))
    placed = eventually(lambda: (lambda ps: ps if len(ps) == 4 else None)(
        bound(members(admin, namespace, "llm"))), timeout=120,
        what="the TrainJob's 4 pods bound once a 4th node comes")
    assert sorted(p["spec"]["nodeName"] for p in placed) == sorted(nodes)
    assert [sorted(int(d) for d in p["metadata"]["annotations"][DEVICES].split(","))
            for p in placed] == [[0, 1, 2, 3]] * 4
    assert [[e for e in p["spec"]["containers"][0].get("env") or () if e["name"] == REF["name"]]
            for p in placed] == [[REF]] * 4


def test_trainers_webhook_answers_kube_apiserver_on_loopback(
        binder: Running, admin: Client, namespace: str) -> None:  # noqa: F811
    """Trainer's own validation is served (127.0.0.1, a certificate from the control
    plane's CA, no certificate rotator): a TrainJob naming no runtime is refused with
    its message, not admitted and left to fail later."""
    with pytest.raises(errors.ApiError) as refused:
        admin.create(trainjob("lost", "no-such-runtime", nodes=1, gpus=1), namespace=namespace)
    assert "specified clusterTrainingRuntime must be created before the TrainJob" in str(
        refused.value), refused.value
