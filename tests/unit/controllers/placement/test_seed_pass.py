"""A seed pod's or a pod group's plan is a scheduling pass like a GPUWorkload's
(``controllers/placement/seeds.py``): made outside the placement cache's lock, then
booked in one section unless a node it books changed meanwhile, in which case it is
made again on the new state (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from controllers.placement.seeds import SeedDoor
from internal.metrics.domain import STALE_DECISIONS
from internal.scheduling.scheduler import Scheduler
from tests.unit.controllers.podbinding.fixtures import GroupEnv, member
from tests.unit.controllers.podbinding.test_podbinding import NS, Env, pod


def watch_plans(monkeypatch: pytest.MonkeyPatch, env: Env, method: str,
                during: Any = None) -> list[bool]:
    """Wraps every plan ``method`` (``book_seed`` or ``book_group``) is handed:
    records whether the cache's lock was held while it ran, and runs ``during``
    (what happens in the cluster while the pass is made) after the first one."""
    held: list[bool] = []
    door = env.state.seeds
    original = getattr(SeedDoor, method)

    def spy(self: SeedDoor, book: Any, *args: Any, **kw: Any) -> Any:
        plan = args[-1] if method == "book_seed" else args[0]

        def watched(view: Any) -> Any:
            held.append(env.state._lock.busy)
            planned = plan(view)
            if during is not None and len(held) == 1:
                during(planned)
            return planned
        if method == "book_seed":
            return original(self, book, args[0], watched, **kw)
        return original(self, book, watched, *args[1:], **kw)

    monkeypatch.setattr(door, method, spy.__get__(door))
    return held


def stale_count() -> float:
    return STALE_DECISIONS.labels("retried")._value.get()


def test_a_seed_pods_plan_runs_outside_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    env = Env()
    env.add(pod("plain-0", map_text=None, owner=None))
    held = watch_plans(monkeypatch, env, "book_seed")
    env.reconcile("plain-0")
    assert held == [False]  # no other reconcile or event waited on this pass
    node_name, devs = env.bound()["plain-0"]
    assert env.holder(node_name, int(devs)) == f"Pod:{NS}/plain-0"


def intruder(node_name: str) -> dict[str, Any]:
    """A pod another scheduler bound onto all four devices of ``node_name``."""
    return pod("intruder", map_text=None, owner=None, node_name=node_name, gpus=4,
               phase="Running", scheduler="default-scheduler",
               annotations={"gpu.orchestrator.dev/devices": "0,1,2,3"})


def test_a_group_planned_onto_a_node_taken_meanwhile_is_planned_again_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the group's pass ran, a pod of another scheduler came to one of the
    nodes it planned: the plan is not booked over it (which the ledger would
    refuse, leaving the group unbound this round) but made again around it."""
    env = GroupEnv()
    taken: list[str] = []

    def arrives(planned: Any) -> None:
        entries = planned[0]
        assert entries is not None
        taken.append(next(iter(entries.values())).placement.node)
        p = intruder(taken[0])
        env.add(p)
        env.state.events.on_pod(p)

    held = watch_plans(monkeypatch, env, "book_group", arrives)
    walks: list[bool] = []  # was the lock held while a member's nodes were walked?
    schedule = Scheduler.schedule

    def walked(self: Scheduler, *args: Any, **kw: Any) -> Any:
        walks.append(env.state._lock.busy)
        return schedule(self, *args, **kw)
    monkeypatch.setattr(Scheduler, "schedule", walked)
    before = stale_count()
    env.add(member("pair", 0, size=2, gpus=4))
    env.add(member("pair", 1, size=2, gpus=4))
    env.reconcile("pair-1")
    assert held[:2] == [False, False]  # planned outside the lock, twice
    assert walks and not any(walks)  # and no node walk of it held the lock
    assert stale_count() == before + 1
    env.reconcile("pair-0")
    bound = env.bound()
    assert sorted(bound) == ["pair-0", "pair-1"]
    assert taken[0] not in {n for n, _ in bound.values()}
    assert {env.holder(taken[0], d) for d in range(4)} == {f"{NS}/intruder"}


def test_a_group_booked_by_another_member_meanwhile_is_not_booked_again_elsewhere() -> None:
    """Two members of one complete group reconciled at once both plan it; the
    first books it on node1. The second's plan (node2: a strategy may well differ
    between passes) touches none of node1, yet booked over the first it would
    move the group while the first member binds to node1: it is planned again,
    finds the group booked, and books nothing."""
    from api.v1alpha1.types import Placement
    from controllers.podbinding.seedbook import Entry

    env = GroupEnv()
    state, book = env.state, env.book
    key = f"PodGroup:{NS}/label:g"

    def entries(node: str) -> dict[str, Entry]:
        return {f"{NS}/g-{i}": Entry(key, Placement(index=i, node=node, devices=[i]), 1,
                                     uid=f"uid-g-{i}", slot=i) for i in range(2)}

    plans: list[str] = []

    def second(view: Any) -> Any:
        if book.entry(f"{NS}/g-1") is not None:  # the group's plan reads its book
            plans.append("found booked")
            return None, "booked", None
        plans.append("planned on node2")
        if len(plans) == 1:  # meanwhile the other member's reconcile books it
            got = state.seeds.book_group(book, lambda v: (entries("node1"), "", None))
            assert got[0] is not None
        return entries("node2"), "", None

    got, why, _ = state.seeds.book_group(book, second)
    assert (got, why) == (None, "booked")
    assert plans == ["planned on node2", "found booked"]
    assert {book.entry(f"{NS}/g-{i}").placement.node for i in range(2)} == {"node1"}
    assert env.holder("node2", 0) is None and env.holder("node1", 0) == key
