"""A JobSet's pods, made by the real JobSet and Job controllers, are one pod group
(internal/scheduling/podgroups.py, docs/podgroups.md), read from the live pods and
the live JobSet: one group of the whole JobSet per restart attempt, or one per
replicated job under InOrder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hack.testenv import ControlPlane
from internal.scheduling.podgroups import PodGroup, pod_group
from runtime import Client, errors
from tests.integration.podgroups.conftest import REF
from tests.integration.podgroups.controllers import JOBSET, PeerController, jobset
from tests.waiting import eventually


@pytest.fixture(scope="module")
def controller(cluster: ControlPlane) -> Iterator[PeerController]:
    run = PeerController(cluster, JOBSET).start()
    yield run
    run.stop()


@pytest.fixture(scope="module")
def admin(cluster: ControlPlane) -> Client:
    return Client.from_kubeconfig(str(cluster.kubeconfig))


def members(admin: Client, namespace: str, want: int) -> list[PodGroup]:
    """Every pod of ``namespace`` once there are ``want``, through the live owners."""
    def owners(api: str, kind: str, ns: str, name: str) -> dict | None:
        try:
            return dict(admin.get(api, kind, name, ns))
        except errors.NotFound:
            return None

    pods = eventually(lambda: (lambda items: items if len(items) == want else None)(
        admin.list("v1", "Pod", namespace=namespace)["items"]),
        timeout=90, what=f"{want} pods made by the JobSet and Job controllers")
    groups = [pod_group(p, owners) for p in pods]
    assert all(isinstance(g, PodGroup) for g in groups), groups
    return groups  # type: ignore[return-value]


def test_a_jobsets_pods_are_one_group_of_its_size(
        controller: PeerController, admin: Client, namespace: str) -> None:
    """4 pods x 4 GPUs as the issue's user ran it: a launcher Job of 1 pod and 3 worker
    Jobs of 1 pod: 4 members of one group, indices 0..3."""
    admin.create(jobset("train", [("launcher", 1, 1), ("workers", 3, 1)]), namespace=namespace)
    groups = members(admin, namespace, 4)
    assert {g.key for g in groups} == {f"{namespace}/jobset:train:0"}
    assert {g.size for g in groups} == {4}
    assert sorted(g.index for g in groups) == [0, 1, 2, 3]


def test_jobs_of_several_pods_count_each_pod(
        controller: PeerController, admin: Client, namespace: str) -> None:
    admin.create(jobset("ring", [("workers", 2, 3)]), namespace=namespace)
    groups = members(admin, namespace, 6)
    assert {(g.key, g.size) for g in groups} == {(f"{namespace}/jobset:ring:0", 6)}
    assert sorted(g.index for g in groups) == list(range(6))


def test_in_order_each_replicated_job_is_a_group_of_its_own(
        controller: PeerController, admin: Client, namespace: str) -> None:
    """InOrder: the workers' Jobs are made only once the launcher is ready, which
    nothing runs here; a group of the whole JobSet could never be complete."""
    admin.create(jobset("staged", [("launcher", 1, 1), ("workers", 2, 2)], order="InOrder"),
                 namespace=namespace)
    groups = members(admin, namespace, 1)
    assert [(g.key, g.size, g.index) for g in groups] == [
        (f"{namespace}/jobset:staged:0:launcher", 1, 0)]


def test_every_member_reads_its_devices_from_the_binding(
        controller: PeerController, exposure: None, admin: Client, namespace: str) -> None:
    """The job controller's pods pass JobSet's pod webhook, ours and the pod-devices
    policy: each GPU container's CUDA_VISIBLE_DEVICES is the devices annotation's,
    which the Binding of its group's placement writes."""
    admin.create(jobset("seen", [("launcher", 1, 1), ("workers", 1, 2)]), namespace=namespace)
    members(admin, namespace, 3)
    pods = admin.list("v1", "Pod", namespace=namespace)["items"]
    assert [[e for e in p["spec"]["containers"][0]["env"] if e["name"] == REF["name"]]
            for p in pods] == [[REF]] * 3
