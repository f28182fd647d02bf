"""Another controller's gang on the seed path (controllers/podbinding/groups.py),
against an in-memory cache, a fake client and the real PlacementState: nothing is
held until every member exists, then the whole group is placed or none of it, and
two groups can never split the capacity between them."""

from __future__ import annotations

from controllers.podbinding.controller import PodBindingOptions
from runtime import Request
from tests.unit.controllers.podbinding.fixtures import GroupEnv, member
from tests.unit.controllers.podbinding.test_podbinding import NS, Env, pod


def test_a_group_holds_nothing_until_every_member_exists_then_all_are_bound() -> None:
    env = GroupEnv()
    for i in range(3):
        env.add(member("train", i))
        env.reconcile(f"train-{i}")
    assert env.bound() == {} and env.held() == {f"node{n}": set() for n in range(1, 5)}
    assert "3 of 4 exist; no GPU is held" in env.reasons("train-2", "WaitingForGroup")[0]
    env.add(member("train", 3))
    env.reconcile("train-3")  # the last member books the whole group, binds itself
    assert sorted(env.enqueued) == ["train-0", "train-1", "train-2"]
    for name in env.enqueued:
        env.reconcile(name)
    bound = env.bound()
    assert sorted(bound) == [f"train-{i}" for i in range(4)]
    assert sorted(n for n, _ in bound.values()) == ["node1", "node2", "node3", "node4"]
    assert all(devs == "0,1,2,3" for _, devs in bound.values())


def test_a_group_with_room_for_three_of_four_holds_no_gpu_and_says_why() -> None:
    env = GroupEnv([pod("other-0", map_text=None, owner=None, node_name="node1",
                        phase="Running", scheduler="default-scheduler",
                        annotations={"gpu.orchestrator.dev/devices": "0,1,2,3"})])
    for i in range(4):
        env.add(member("train", i))
    for i in range(4):
        env.reconcile(f"train-{i}")
    assert env.bound() == {}
    assert env.held() == {"node1": {0, 1, 2, 3}, "node2": set(), "node3": set(),
                          "node4": set()}  # only the other pod's
    why = env.warnings("train-3")[0]
    assert why.startswith(f"pod group {NS}/label:train (4 of 4 members to place)"), why


def test_two_racing_groups_on_room_for_one_one_runs_and_the_other_holds_nothing() -> None:
    env = GroupEnv()
    for i in range(4):
        env.add(member("a", i))
        env.add(member("b", i))
    order = [f"{g}-{i}" for i in range(4) for g in ("a", "b")]  # interleaved
    for name in order:
        env.reconcile(name)
    for name in list(env.enqueued):
        env.reconcile(name)
    bound = env.bound()
    groups = {name.split("-")[0] for name in bound}
    assert len(groups) == 1 and len(bound) == 4, bound  # one whole group, never 3+1
    loser = ({"a", "b"} - groups).pop()
    assert env.state.view().allocation(f"PodGroup:{NS}/label:{loser}") is None
    assert env.warnings(f"{loser}-0")  # FailedScheduling: no room for the whole group
    # the winner goes: the other is placed on what it freed
    winner = groups.pop()
    for i in range(4):
        env.pods.delete(f"{NS}/{winner}-{i}")
        env.reconcile(f"{winner}-{i}")
    env.client.bindings.clear()
    env.enqueued.clear()
    env.reconcile(f"{loser}-0")
    for name in list(env.enqueued):
        env.reconcile(name)
    assert sorted(env.bound()) == [f"{loser}-{i}" for i in range(4)]


def test_a_group_short_of_members_past_its_timeout_is_reported_once() -> None:
    env = GroupEnv()
    env.rec = env.reconciler(PodBindingOptions(group_timeout=0.0))
    env.add(member("train", 0))
    env.reconcile("train-0")
    env.reconcile("train-0")
    late = env.reasons("train-0", "PodGroupIncomplete")
    assert len(late) == 1 and "1 of 4 exist" in late[0]


def test_a_bound_group_holds_under_its_group_key_after_a_restart() -> None:
    """So a preemption takes the whole group: its victims are ledger keys."""
    env = GroupEnv()
    for i in range(2):
        env.add(member("pair", i, size=2))
    env.reconcile("pair-1")
    env.reconcile("pair-0")
    env.show_bindings(running=False)  # the API server sets nodeName and the annotation
    env.rebuild()
    assert env.state.seeds.seed_pod_keys(env.book, f"PodGroup:{NS}/label:pair") == [
        f"{NS}/pair-0", f"{NS}/pair-1"]
    assert env.rec.reconcile(Request(NS, "pair-0")) is None


def test_a_group_asking_nvidia_gpu_goes_only_to_named_nodes_and_says_so() -> None:
    """No named node: a member's CUDA_VISIBLE_DEVICES (a reference to the devices
    annotation) would be empty on counted GPUs, hiding every GPU; and where the device
    plugin picks devices, named ones could be others than its. The group waits."""
    env = Env()
    env.rec = GroupEnv.reconciler(env)  # type: ignore[arg-type]
    for i in range(2):
        env.add(member("pair", i, size=2, gpus=4))
    env.rec.reconcile(Request(NS, "pair-1"))
    env.rec.reconcile(Request(NS, "pair-0"))
    assert env.bound() == {}
    assert "go only to nodes labelled gpu.orchestrator.dev/device-authority=named" in \
        env.warnings("pair-0")[0]


def test_members_that_disagree_on_the_size_are_refused_and_hold_nothing() -> None:
    env = GroupEnv()
    env.add(member("odd", 0, size=2))
    env.add(member("odd", 1, size=3))
    env.reconcile("odd-0")
    env.reconcile("odd-1")
    assert env.bound() == {}
    said = env.reasons("odd-1", "PodGroupSizesDisagree")
    assert len(said) == 1 and "different sizes" in said[0]
