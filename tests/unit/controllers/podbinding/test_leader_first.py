"""A LeaderWorkerSet group under ``startupPolicy: LeaderReady`` is placed whole at its
leader (controllers/podbinding/leaderfirst.py, groups.py): every member's devices
booked, only the leader bound, each worker binding to the slot of its index when
made; the slots are held from everybody else, go with the leader, come back after
a restart from the leader's annotation, and workers that never come are reported."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from controllers.podbinding.controller import PodBindingOptions
from internal.cli.holders import controller_holdings
from internal.metrics.domain import POD_GROUP_TIMEOUTS
from runtime.store import thaw
from tests.unit.controllers.podbinding.fixtures import ALL_FREE, OwnedEnv, lws_member, member
from tests.unit.controllers.podbinding.test_podbinding import NS

KEY = f"PodGroup:{NS}/leaderworkerset:serve:0"


def lws(gpus: int = 4, startup: str = "LeaderReady") -> dict[str, Any]:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "serve", "namespace": NS},
            "spec": {"startupPolicy": startup, "leaderWorkerTemplate": {
                "size": 3, "workerTemplate": {"spec": {"containers": [{
                    "name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}}


def lws_pod(worker: int, gpus: int = 4) -> dict[str, Any]:
    return lws_member("serve", "serve-0" if worker == 0 else f"serve-0-{worker}", worker,
                      size=3, gpus=gpus)


class LeaderEnv(OwnedEnv):
    """OwnedEnv serving the LeaderWorkerSet ``serve``, its groups timing out after
    ``timeout`` seconds."""

    def __init__(self, *args: Any, the_lws: dict[str, Any] | None = None,
                 timeout: float = 300.0, **kw: Any) -> None:
        super().__init__("LeaderWorkerSet", "serve", the_lws if the_lws is not None else lws(),
                         *args, options=PodBindingOptions(group_timeout=timeout), **kw)


def placed_leader(env: LeaderEnv, ready: datetime | None = None) -> dict[int, tuple[str, str]]:
    return env.placed_first(lws_pod(0), ready)


def test_the_leader_alone_is_bound_holding_every_members_devices() -> None:
    env = LeaderEnv()
    slots = placed_leader(env)
    assert list(env.bound()) == ["serve-0"]
    assert sorted(slots) == [1, 2]
    held = env.held()
    assert sum(len(d) for d in held.values()) == 12  # 3 members x 4 GPUs
    for node, devs in slots.values():
        assert {int(d) for d in devs.split(",")} <= held[node]
        assert all(env.holder(node, int(d)) == KEY for d in devs.split(","))
    assert env.enqueued == []  # no pod to bind but the leader


def test_each_worker_made_later_binds_to_the_slot_of_its_index() -> None:
    env = LeaderEnv()
    slots = placed_leader(env)
    held = env.held()
    for i in (2, 1):
        env.add(lws_pod(i))
        env.reconcile(f"serve-0-{i}")
    bound = env.bound()
    assert bound["serve-0-1"] == slots[1] and bound["serve-0-2"] == slots[2], (bound, slots)
    assert env.held() == held  # nothing more, nothing elsewhere
    assert env.book.vacancies(KEY) == []


def test_the_workers_slots_are_never_free_to_another_group() -> None:
    """12 of 16 GPUs are the LWS group's (4 bound, 8 held for its workers): a group
    of 2 x 4 GPUs does not fit, and says so."""
    env = LeaderEnv()
    placed_leader(env)
    for i in range(2):
        env.add(member("other", i, size=2))
    for i in range(2):
        env.reconcile(f"other-{i}")
    assert list(env.bound()) == ["serve-0"]
    assert env.warnings("other-1"), env.recorder.events


def test_on_room_for_the_leader_alone_nothing_is_held_and_the_leader_says_why() -> None:
    env = LeaderEnv(the_lws=lws(gpus=8))  # the workers ask 8 GPUs: no node has them
    env.add(lws_pod(0, gpus=4))
    env.reconcile("serve-0")
    assert env.bound() == {} and env.held() == ALL_FREE
    why = env.warnings("serve-0")[0]
    assert why.startswith(f"pod group {NS}/leaderworkerset:serve:0 (3 of 3 members to place,"
                          " 2 of them workers"), why


def test_preempting_the_group_takes_the_leader_and_the_reserved_slots() -> None:
    env = LeaderEnv()
    placed_leader(env)
    asked: list[str] = []
    env.book.on_evict = lambda key, message: asked.append(key)  # asked to go
    env.book.evict(KEY, "preempted by ns/urgent (priority 100) to make room")
    assert asked == [KEY]
    env.pods.delete(f"{NS}/serve-0")
    env.reconcile("serve-0")
    assert env.held() == ALL_FREE
    assert env.state.view().allocation(KEY) is None


def test_after_a_restart_the_slots_are_booked_again_from_the_leaders_annotation() -> None:
    env = LeaderEnv()
    slots = placed_leader(env)
    held = env.held()
    env.rebuild()  # the state refilled from the caches (a restart)
    assert env.held() == held
    env.client.bindings.clear()
    env.add(lws_pod(1))
    env.reconcile("serve-0-1")
    assert env.bound() == {"serve-0-1": slots[1]}


def test_workers_that_never_come_are_reported_once_and_their_slots_stay_held() -> None:
    env = LeaderEnv(timeout=60.0)
    before = POD_GROUP_TIMEOUTS._value.get()
    placed_leader(env, ready=datetime.now(UTC) - timedelta(seconds=10))
    assert env.reconcile("serve-0").requeue_after > 0  # looked at again
    assert not [e for e in env.recorder.events if e[2] == "PodGroupIncomplete"]
    env.show_binding("serve-0", ready=datetime.now(UTC) - timedelta(seconds=90))
    assert env.reconcile("serve-0") is None
    env.reconcile("serve-0")
    said = [m for n, _, r, m in env.recorder.events if r == "PodGroupIncomplete"]
    assert len(said) == 1 and "no worker has come for slot(s) 1,2" in said[0], said
    assert POD_GROUP_TIMEOUTS._value.get() == before + 1
    assert sum(len(d) for d in env.held().values()) == 12


def test_kubectl_gpu_nodes_shows_the_workers_slots_held() -> None:
    """``kubectl gpu`` rebuilds the ledger from the API as the manager does: the bound
    leader's annotation books its workers' slots there too."""
    env = LeaderEnv()
    slots = placed_leader(env)
    leader = thaw(env.pods.get_by_name("serve-0", NS))  # made by its StatefulSet
    leader["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                              "name": "serve", "uid": "sts", "controller": True}]
    h = controller_holdings(env.nodes, [], [], [leader], now=datetime.now(UTC),
                            stale_after=60.0, driver="gpu.orchestrator.dev")
    for i, (node, devs) in slots.items():
        assert [h.device_holders(node, int(d)) for d in devs.split(",")] == \
            [[f"{NS}/statefulset/serve[{i}]"]] * len(devs.split(",")), (node, devs)
    assert h.problems == []
