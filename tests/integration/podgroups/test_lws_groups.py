"""A LeaderWorkerSet's pods, made by the real LeaderWorkerSet and StatefulSet
controllers (LWS's own pod webhook labelling them), are one pod group per LWS group
(internal/scheduling/podgroups.py, docs/podgroups.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hack.testenv import ControlPlane
from internal.scheduling.podgroups import PodGroup
from runtime import Client
from tests.integration.podgroups.conftest import REF
from tests.integration.podgroups.controllers import LWS, PeerController, leaderworkerset
from tests.integration.podgroups.fixtures import groups_of


@pytest.fixture(scope="module")
def controller(cluster: ControlPlane) -> Iterator[PeerController]:
    run = PeerController(cluster, LWS).start()
    yield run
    run.stop()


def members(admin: Client, namespace: str, want: int) -> list[tuple[str, PodGroup]]:
    return groups_of(admin, namespace, want, "the LWS and StatefulSet controllers")


def test_each_lws_group_is_a_pod_group_of_its_size(
        controller: PeerController, admin: Client, namespace: str) -> None:
    admin.create(leaderworkerset("infer", replicas=2, size=2), namespace=namespace)
    got = [(name, g.key, g.size, g.index, g.leader_first)
           for name, g in members(admin, namespace, 4)]
    lws = f"{namespace}/leaderworkerset:infer"
    assert got == [("infer-0", f"{lws}:0", 2, 0, False), ("infer-0-1", f"{lws}:0", 2, 1, False),
                   ("infer-1", f"{lws}:1", 2, 0, False), ("infer-1-1", f"{lws}:1", 2, 1, False)]


def test_leader_ready_makes_the_leader_alone_and_says_so(
        controller: PeerController, admin: Client, namespace: str) -> None:
    """LeaderReady: the workers are made once the leader is Ready, which no pod of
    gpu-scheduler is here: only the leader exists, and its group says leader_first
    (docs/podgroups.md, the proposed design)."""
    admin.create(leaderworkerset("serve", replicas=1, size=3, startup="LeaderReady"),
                 namespace=namespace)
    got = [(name, g.key, g.size, g.index, g.leader_first)
           for name, g in members(admin, namespace, 1)]
    assert got == [("serve-0", f"{namespace}/leaderworkerset:serve:0", 3, 0, True)]


def test_every_member_reads_its_devices_from_the_binding(
        controller: PeerController, exposure: None, admin: Client, namespace: str) -> None:
    """The leader (made by the StatefulSet controller, labelled by LWS's pod webhook,
    which runs after ours) and its workers each carry the reference."""
    admin.create(leaderworkerset("seen", replicas=1, size=3), namespace=namespace)
    members(admin, namespace, 3)
    pods = admin.list("v1", "Pod", namespace=namespace)["items"]
    assert [[e for e in p["spec"]["containers"][0].get("env") or [] if e["name"] == REF["name"]]
            for p in pods] == [[REF]] * 3
