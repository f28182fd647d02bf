"""After a kill -9, a bound pod group's members keep their devices against a
GPUWorkload status that still names them (no server).

The workload's attempt had ended (its pods gone: preempted, a replica deleted) and
its status write (placements cleared) died with the process; a pod group was bound
on the devices it freed. The restarted manager's rebuild must book what runs before
what a status says (docs/architecture.md, invariant 4): the members stay booked
under their group, and none of them is reported as bound outside this scheduler
(``DeviceConflict``, the group churn's ``pod.adopt.conflict``) or evicted for it
(``--evict-conflicting-pods``); the stale placement is the one not booked, and its
workload's own reconcile ends that attempt.
"""

from __future__ import annotations

from typing import Any

from tests.unit.controllers.podbinding.fixtures import GroupEnv, member
from tests.unit.controllers.podbinding.test_podbinding import NS

GROUP_KEY = f"PodGroup:{NS}/label:pair"


def bound_pair(env: GroupEnv) -> dict[str, tuple[str, str | None]]:
    """A group of two 4-GPU members, placed and bound (the API server sets each
    member's nodeName and devices annotation from its Binding)."""
    for i in range(2):
        env.add(member("pair", i, size=2, gpus=4))
    env.reconcile("pair-1")
    env.reconcile("pair-0")
    for b in env.client.bindings:
        p = env.pods.get_by_name(b["metadata"]["name"], NS)
        env.pods.add({**p, "spec": {**p["spec"], "nodeName": b["target"]["name"]},
                      "metadata": {**p["metadata"], "annotations": {
                          **p["metadata"]["annotations"], **b["metadata"]["annotations"]}}})
    bound = env.bound()
    assert sorted(bound) == ["pair-0", "pair-1"]
    return bound


def stale(name: str, node: str, devices: list[int], phase: str = "Running") -> dict[str, Any]:
    """A GPUWorkload of another namespace whose status still names ``devices``."""
    return {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": "q", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"gpusPerReplica": len(devices)},
            "status": {"phase": phase, "retries": 0,
                       "placements": [{"index": 0, "node": node, "devices": devices}]}}


def conflicts(env: GroupEnv) -> list[tuple[str, str]]:
    return [(n, m) for n, t, r, m in env.recorder.events if r == "DeviceConflict"]


def test_a_bound_group_keeps_its_devices_against_a_stale_workload_status() -> None:
    env = GroupEnv()
    node, devs = bound_pair(env)["pair-0"]
    assert devs is not None
    devices = [int(d) for d in devs.split(",")]

    problems = env.rebuild([stale("w5", node, devices)])  # the restarted manager's
    assert any(p.startswith("q/w5: placement not booked") for p in problems), problems
    view = env.state.view()
    assert view.allocation("q/w5") is None
    assert {view.holder(node, d) for d in devices} == {GROUP_KEY}
    for name in ("pair-0", "pair-1"):
        env.reconcile(name)
    assert conflicts(env) == []
    assert env.state.seeds.seed_pod_keys(env.book, GROUP_KEY) == [f"{NS}/pair-0",
                                                                   f"{NS}/pair-1"]
    # w5's reconcile ends its attempt: the devices stay the running members', not
    # free for the next placement to give them a second time
    env.state.forget("q/w5")
    assert env.state.view().free_count(node) == 0
    assert {env.state.view().holder(node, d) for d in devices} == {GROUP_KEY}


def test_a_stale_status_waiting_to_start_is_not_booked_over_a_bound_group() -> None:
    """``Scheduled``: its children were never made, so its reconcile would make
    them on the booked devices, waiting for no holder the ledger does not know of:
    the group's members would share them."""
    env = GroupEnv()
    node, devs = bound_pair(env)["pair-1"]
    assert devs is not None
    env.rebuild([stale("w6", node, [int(d) for d in devs.split(",")], phase="Scheduled")])
    assert env.state.view().allocation("q/w6") is None
    env.reconcile("pair-1")
    assert conflicts(env) == []
