"""The pod-group tests' own fixtures: ``admin`` (for the modules that do not import
the controller tests' one, which installs our CRDs first), our webhook with the
pod-devices policy, for the tests that look at the members' CUDA_VISIBLE_DEVICES,
PriorityClasses of 10 and 100 (``classes``) and two queue teams (``teams``; the
module imports the controller tests' ``installed``). Their helpers are in
fixtures.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.v1alpha1.keys import DEVICES_FIELD_PATH
from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.queue_teams import Teams
from tests.integration.podgroups.controllers import gpu_pod
from tests.integration.webhook.helpers import pod_devices_policy, running_webhook
from tests.waiting import eventually

REF = {"name": "CUDA_VISIBLE_DEVICES",
       "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": DEVICES_FIELD_PATH}}}


@pytest.fixture(scope="module")
def admin(cluster: ControlPlane) -> Client:
    return Client.from_kubeconfig(str(cluster.kubeconfig))


@pytest.fixture
def classes(admin: Client) -> Iterator[dict[int, str]]:
    """PriorityClasses of value 10 and 100 (an admin's): value -> name."""
    made = {v: f"prio-{v}-{uuid.uuid4().hex[:6]}" for v in (10, 100)}
    for value, name in made.items():
        admin.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                      "metadata": {"name": name}, "value": value})
    yield made
    for name in made.values():
        admin.delete("scheduling.k8s.io/v1", "PriorityClass", name)


@pytest.fixture
def teams(installed: ControlPlane, admin: Client) -> Iterator[Teams]:
    """Teams a and b, each a queue of nominal 4 GPUs in one cohort (``Teams``)."""
    t = Teams(installed, admin, nominal=4)
    yield t
    t.cleanup()


@pytest.fixture(scope="module")
def exposure(cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Our webhook (config/webhook's hooks on 127.0.0.1) and the pod-devices policy."""
    certs: Path = tmp_path_factory.mktemp("group-certs")
    with pod_devices_policy(cluster), running_webhook(cluster, certs):
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "probe", "labels": {"gpu.orchestrator.dev/pod-group": "probe"},
            "annotations": {"gpu.orchestrator.dev/pod-group-size": "1"}}, **gpu_pod()}

        def answers() -> bool:
            code, body = cluster.api("POST", "/api/v1/namespaces/default/pods?dryRun=All", probe)
            return code == 201 and body["spec"]["containers"][0].get("env") == [REF]

        eventually(answers, timeout=30, what="our webhook answers kube-apiserver")
        yield
