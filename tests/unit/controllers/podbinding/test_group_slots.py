"""A placed pod group keeps its members' slots (controllers/podbinding/seedbook.py,
groups.py): a bound member that fails or is deleted leaves its node and devices
booked for the member its controller makes again with the same index; the booking
goes with the last member, a finished member gives its slot back, and a preempted
group keeps none."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1alpha1.keys import GROUP_SLOTS_ANNOTATION as SLOTS
from tests.unit.controllers.podbinding.fixtures import (
    GroupEnv,
    bound_as,
    lws_member,
    member,
    slots_of,
)
from tests.unit.controllers.podbinding.test_podbinding import NS

INDEX = "batch.kubernetes.io/job-completion-index"
KEY = f"PodGroup:{NS}/label:train"


def indexed(name: str, i: int, size: int = 3, gpus: int = 2) -> dict[str, Any]:
    p = member("train", i, size=size, gpus=gpus)
    p["metadata"]["name"], p["metadata"]["uid"] = name, f"uid-{name}"
    p["metadata"]["labels"][INDEX] = str(i)
    return p


def placed(env: GroupEnv, size: int = 3) -> dict[str, tuple[str, str]]:
    """A group of ``size`` members x 2 GPUs, placed and bound (the cache shows the
    bindings as the API server writes them): member name -> (node, devices)."""
    for i in range(size):
        env.add(indexed(f"train-{i}", i, size))
    env.reconcile(f"train-{size - 1}")
    for name in list(env.enqueued):
        env.reconcile(name)
    show_bindings(env)
    return dict(env.bound())


def show_bindings(env: GroupEnv) -> None:
    for b in env.client.bindings:
        p = env.pods.get_by_name(b["metadata"]["name"], NS)
        if p is None or p["spec"].get("nodeName"):
            continue
        env.pods.add(bound_as(p, b, {"phase": "Running"}))
        env.reconcile(b["metadata"]["name"])


def test_a_member_made_again_binds_to_the_slot_its_predecessor_left() -> None:
    env = GroupEnv()
    before = placed(env)
    held = env.held()
    env.gone("train-1")
    assert env.held() == held  # its slot stays booked while the others run
    env.client.bindings.clear()
    env.add(indexed("train-1-again", 1))
    env.reconcile("train-1-again")
    assert env.bound() == {"train-1-again": before["train-1"]}
    assert env.held() == held


def test_a_member_that_failed_leaves_its_slot_for_its_retry() -> None:
    env = GroupEnv()
    before = placed(env)
    held = env.held()
    p = env.pods.get_by_name("train-0", NS)
    env.pods.add({**p, "status": {"phase": "Failed"}})
    env.reconcile("train-0")
    assert env.held() == held
    env.client.bindings.clear()
    env.add(indexed("train-0-retry", 0))
    env.reconcile("train-0-retry")
    assert env.bound() == {"train-0-retry": before["train-0"]}


def test_the_last_member_gone_releases_the_group_and_its_slots() -> None:
    env = GroupEnv()
    placed(env)
    for i in range(3):
        env.gone(f"train-{i}")
    assert env.held() == {f"node{n}": set() for n in range(1, 5)}
    assert env.state.view().allocation(KEY) is None


def test_a_member_that_finished_gives_its_slot_back() -> None:
    env = GroupEnv()
    before = placed(env)
    p = env.pods.get_by_name("train-2", NS)
    env.pods.add({**p, "status": {"phase": "Succeeded"}})
    env.reconcile("train-2")
    node, devs = before["train-2"]
    assert not {int(d) for d in devs.split(",")} & env.held()[node]


def test_a_preempted_group_keeps_no_slot() -> None:
    env = GroupEnv()
    placed(env)
    env.book.on_evict = lambda key, message: None  # its 3 members asked to go
    env.book.evict(KEY, "preempted by ns/urgent (priority 100) to make room")
    env.gone("train-1")
    env.client.bindings.clear()
    env.add(indexed("train-1-again", 1))
    env.reconcile("train-1-again")
    assert env.bound() == {}  # not back on its slot, nor anywhere: the group goes
    assert "is being preempted" in env.warnings("train-1-again")[0]


def infer_member(name: str, worker: int, revision: str) -> dict[str, Any]:
    return lws_member("infer", name, worker, size=2, gpus=2, revision=revision)


def test_a_member_of_another_revision_does_not_take_the_old_ones_slot() -> None:
    """An LeaderWorkerSet group keeps its key across a template revision: the old
    revision's vacant slot is not the new member's, and goes when the group is booked
    again."""
    env = GroupEnv()
    env.add(infer_member("infer-0", 0, "a1"))
    env.add(infer_member("infer-0-1", 1, "a1"))
    env.reconcile("infer-0-1")
    for name in list(env.enqueued):
        env.reconcile(name)
    show_bindings(env)
    old = env.bound()["infer-0-1"]
    env.gone("infer-0-1")
    key = f"PodGroup:{NS}/leaderworkerset:infer:0"
    assert [v.placement.node for v in env.book.vacancies(key)] == [old[0]]
    env.client.bindings.clear()
    env.add(infer_member("infer-0-1-new", 1, "b2"))
    env.reconcile("infer-0-1-new")
    assert env.book.vacancies(key) == []  # booked again as a gang: the old slot went
    assert env.bound()["infer-0-1-new"] != old


def test_a_member_made_again_while_its_predecessor_terminates_waits_for_its_slot() -> None:
    """A Job makes the new pod as soon as the old one is terminating: the new one
    is not placed elsewhere (leaving the old slot held for nothing), it waits and
    then takes the old slot."""
    env = GroupEnv()
    before = placed(env)
    p = env.pods.get_by_name("train-1", NS)
    env.pods.add({**p, "metadata": {**p["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
    env.client.bindings.clear()
    env.add(indexed("train-1-again", 1))
    env.reconcile("train-1-again")
    assert env.bound() == {}  # not on node4, free as it is
    env.gone("train-1")
    env.reconcile("train-1-again")
    assert env.bound() == {"train-1-again": before["train-1"]}


def test_a_failed_bind_of_a_member_made_again_leaves_its_slot_vacant() -> None:
    env = GroupEnv()
    before = placed(env)
    held = env.held()
    env.gone("train-1")
    env.client.bindings.clear()
    env.add(indexed("train-1-again", 1))
    env.client.fail = RuntimeError("the API server is away")
    with pytest.raises(RuntimeError):
        env.reconcile("train-1-again")
    assert env.held() == held
    env.client.fail = None
    env.reconcile("train-1-again")
    assert env.bound() == {"train-1-again": before["train-1"]}


def test_after_a_restart_a_member_made_again_takes_its_slot_back() -> None:
    """Every member's Binding names its group's other slots, so a manager restart
    (the ledger rebuilt from the bound pods) keeps the slots of members gone while
    it was down, and of members gone since: the member made again binds to its old
    node and devices, which nobody else may take meanwhile. Before, the slots lived
    in the manager's memory only: a rebuild dropped them, the members made again
    were placed wherever there was room, and with none the group stayed split (one
    member bound, holding its GPUs, the others Pending)."""
    env = GroupEnv()
    before = placed(env)
    held = env.held()
    env.pods.delete(f"{NS}/train-1")  # gone while the manager was down
    env.rebuild()  # the state refilled from the caches (a restart)
    assert env.held() == held
    env.gone("train-2")  # gone after the restart
    assert env.held() == held
    env.client.bindings.clear()
    env.add(indexed("train-2-again", 2))
    env.reconcile("train-2-again")
    env.add(indexed("train-1-again", 1))
    env.reconcile("train-1-again")
    assert env.bound() == {"train-1-again": before["train-1"],
                           "train-2-again": before["train-2"]}
    assert env.held() == held


def test_after_a_restart_the_last_member_gone_frees_the_slots_its_binding_named() -> None:
    env = GroupEnv()
    placed(env)
    env.pods.delete(f"{NS}/train-0")
    env.pods.delete(f"{NS}/train-1")
    env.rebuild()
    env.gone("train-2")
    assert env.held() == {f"node{n}": set() for n in range(1, 5)}


def test_after_a_restart_a_finished_members_slot_is_not_held() -> None:
    env = GroupEnv()
    before = placed(env)
    p = env.pods.get_by_name("train-2", NS)
    env.pods.add({**p, "status": {"phase": "Succeeded"}})
    env.rebuild()
    node, devs = before["train-2"]
    assert not {int(d) for d in devs.split(",")} & env.held()[node]


def test_a_members_binding_names_the_next_eight_slots_of_a_large_group() -> None:
    """A group of 12: each member's Binding names the 8 slots after its own
    (wrapping round), not all 11, so a group of thousands writes no annotation of
    thousands of slots on every member."""
    env = GroupEnv(gpus=8)
    placed(env, size=12)
    notes = {b["metadata"]["name"]: slots_of(b["metadata"]["annotations"][SLOTS])
             for b in env.client.bindings}
    assert sorted(notes["train-10"]) == [0, 1, 2, 3, 4, 5, 6, 11]
    assert sorted(notes["train-0"]) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_after_a_restart_a_slot_another_holder_took_stays_its() -> None:
    """A slot a member's Binding named is booked again only where nobody holds it
    now: a GPUWorkload placed there (its status read on the restart) keeps its
    devices, unreported, and the slot is not the group's any more."""
    env = GroupEnv()
    before = placed(env)
    node, devs = before["train-1"]
    env.pods.delete(f"{NS}/train-1")
    wl = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
          "metadata": {"name": "gw", "namespace": NS},
          "spec": {"gpusPerReplica": 2},
          "status": {"phase": "Running", "placements": [
              {"index": 0, "node": node, "devices": [int(d) for d in devs.split(",")]}]}}
    problems = env.rebuild([wl])
    assert problems == []
    assert {env.holder(node, int(d)) for d in devs.split(",")} == {f"{NS}/gw"}
    assert env.book.vacancies(KEY) == []
