"""A LeaderWorkerSet with ``startupPolicy: LeaderReady``, as a user runs it: the real
LWS controller makes the leader alone and its workers only once the leader is Ready
(kwok makes a pod Ready once the test environment's admitter admits it), and the
manager's pod binding places the whole group at the leader (docs/podgroups.md,
"LeaderWorkerSet and LeaderReady"): the leader is bound holding every member's
booking, each worker binds to the slot of its index; on room for fewer members,
nothing is bound and the leader says why. (Before, the leader waited for workers
that are never made: nothing ran, for good.)"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from runtime import Client
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    group,
    installed,
)
from tests.integration.podgroups.controllers import LWS, gpu_pod
from tests.integration.podgroups.fixtures import (
    LWS_NAME,
    members,
    named,
    named_nodes,
    nodes_shown,
    peer_fixtures,
    pinned,
    slots_of,
    told,
    when,
)
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"
SLOTS = "gpu.orchestrator.dev/group-slots"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


peers, binder = peer_fixtures(LWS)


def leader_ready(name: str, group: NodeGroup) -> dict[str, Any]:  # noqa: F811
    """1 group of a leader and 2 workers, 2 GPUs each, LeaderReady."""
    pod = pinned(gpu_pod(2), group)
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "startupPolicy": "LeaderReady",
                     "leaderWorkerTemplate": {"size": 3, "workerTemplate": pod}}}


def pods_of(admin: Client, ns: str, name: str) -> dict[str, dict[str, Any]]:  # noqa: F811
    return named(members(admin, ns, name, LWS_NAME))


def ready_since(pod: dict[str, Any]) -> datetime | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready" and c.get("status") == "True":
            return when(c["lastTransitionTime"])
    return None


def test_a_leader_ready_group_is_placed_whole_at_its_leader_and_workers_take_their_slots(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    binder.wait_nodes(named_nodes(group, 2))  # room: 8
    admin.create(leader_ready("serve", group), namespace=namespace)

    def all_bound() -> dict[str, dict[str, Any]] | None:
        pods = pods_of(admin, namespace, "serve")
        return pods if len(pods) == 3 and all(p["spec"].get("nodeName")
                                              for p in pods.values()) else None
    pods = eventually(all_bound, timeout=120, what="the leader and its 2 workers bound")
    leader = pods["serve-0"]
    # the leader was bound first, holding every worker's slot in its booking
    reserved = slots_of(leader["metadata"]["annotations"][SLOTS])
    assert sorted(reserved) == [1, 2], reserved
    ready = ready_since(leader)
    assert ready is not None, leader["status"]
    workers = {n: p for n, p in pods.items() if n != "serve-0"}
    assert sorted(workers) == ["serve-0-1", "serve-0-2"]
    for name, p in workers.items():
        # made by LWS only once the leader was Ready, each on the slot of its index
        assert when(p["metadata"]["creationTimestamp"]) >= ready.replace(microsecond=0), (
            name, p["metadata"]["creationTimestamp"], ready)
        index = int(p["metadata"]["labels"][WORKER_INDEX])
        assert (p["spec"]["nodeName"], p["metadata"]["annotations"][DEVICES]) == \
            reserved[index], (name, reserved)
    held = [(p["spec"]["nodeName"], d) for p in pods.values()
            for d in p["metadata"]["annotations"][DEVICES].split(",")]
    assert len(held) == 6 and len(set(held)) == 6, held  # every member's devices distinct
    # what the user sees: 6 devices of the group's nodes held, 2 free
    shown = nodes_shown(binder.cluster.kubeconfig, capsys, group.names)
    holders = [d.get("holder") for n in shown for d in n["devices"] if d.get("holder")]
    assert len(holders) == 6, shown


def test_a_leader_ready_group_on_room_for_fewer_binds_nothing_and_the_leader_says_why(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:  # noqa: F811
    binder.wait_nodes(named_nodes(group, 1))  # room: 2
    admin.create(leader_ready("big", group), namespace=namespace)
    why = eventually(lambda: told(admin, namespace, ["big-0"], "FailedScheduling", "pod group"),
                     timeout=120, what="the leader's FailedScheduling naming its group")
    assert f"pod group {namespace}/leaderworkerset:big:0 (3 of 3 members to place" in why, why
    pods = pods_of(admin, namespace, "big")
    assert sorted(pods) == ["big-0"]  # the workers are never made: the leader never ran
    assert not pods["big-0"]["spec"].get("nodeName")
