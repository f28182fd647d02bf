"""A pod group as a preemptor (controllers/podbinding/grouppreempt.py, the seed
door's ``book_group``), against an in-memory cache, a fake client and the real
PlacementState: a higher-priority group with the ``priority`` strategy takes exactly
the lower-priority holders it needs, whole, booked as a nomination in the same step,
and its members bind only once the victims are gone."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from tests.unit.controllers.placement.test_placement_state import gw
from tests.unit.controllers.podbinding.fixtures import GroupEnv, member
from tests.unit.controllers.podbinding.test_podbinding import NS, EvictingClient

STRATEGY = "gpu.orchestrator.dev/strategy"


def low(name: str, node: str, priority: int = 0, ns: str = NS) -> dict[str, Any]:
    """A running GPUWorkload holding all 4 GPUs of ``node``."""
    return {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"gpusPerReplica": 4, "priority": priority},
            "status": {"phase": "Running", "retries": 0,
                       "placements": [{"index": 0, "node": node, "devices": [0, 1, 2, 3]}]}}


def high(group: str, i: int, size: int = 2, priority: int = 100,
         strategy: str | None = "priority", **spec: Any) -> dict[str, Any]:
    p = member(group, i, size=size)
    p["spec"]["priority"] = priority
    p["spec"].update(spec)
    if strategy:
        p["metadata"]["annotations"][STRATEGY] = strategy
    return p


class Client(EvictingClient):
    """Evictions recorded; the namespace's PodDisruptionBudgets as given."""

    def __init__(self) -> None:
        super().__init__()
        self.budgets: list[dict[str, Any]] = []

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> dict:
        assert kind == "PodDisruptionBudget"
        return {"items": self.budgets}


def full(workloads: list[dict[str, Any]]) -> GroupEnv:
    """node1..node4, each held whole by one of ``workloads`` (made before the group)."""
    env = GroupEnv()
    env.client = Client()
    env.rec = env.reconciler()
    env.book.on_evict = env.rec.evict_holder  # as setup_podbinding_controller wires it
    env.rebuild(workloads)
    return env


def place(env: GroupEnv, group: str, size: int = 2, **kw: Any) -> None:
    for i in range(size):
        env.add(high(group, i, size=size, **kw))
    for i in range(size):
        env.reconcile(f"{group}-{i}")


def evicting(env: GroupEnv, *names: str) -> dict[str, str | None]:
    return {n: env.state.eviction(f"{NS}/{n}") for n in names}


def test_a_higher_priority_group_takes_exactly_the_victims_it_needs_and_binds_once_they_go(
) -> None:
    env = full([low(f"w{n}", f"node{n}") for n in range(1, 5)])
    before = REGISTRY.get_sample_value("gpu_orchestrator_preemptions_total") or 0
    place(env, "urgent")
    assert REGISTRY.get_sample_value("gpu_orchestrator_preemptions_total") == before + 2
    told = evicting(env, "w1", "w2", "w3", "w4")
    victims = sorted(n for n, m in told.items() if m)
    assert len(victims) == 2, told  # 2 members x 4 GPUs: two nodes, no more
    assert all("preempted by PodGroup:" in (told[v] or "") and "(priority 100)" in (told[v] or "")
               for v in victims)
    assert env.bound() == {}  # the victims still hold the devices: nobody binds yet
    booking = env.state.view().allocation(f"PodGroup:{NS}/label:urgent")
    assert booking is not None and booking.overlap  # a nomination over the victims
    nodes = {f"node{v[1]}" for v in victims}
    assert {p.node for p in booking.placements} == nodes
    said = [m for n, _, r, m in env.recorder.events if r == "Preempting"]
    assert len(said) == 2 and all(f"{NS}/{v}" in said[0] for v in victims), said
    waiting = [m for n, _, r, m in env.recorder.events if r == "WaitingForPreemption"]
    assert waiting and "departing:" in waiting[0], waiting
    # a workload placed meanwhile never gets the nominated devices: one that waits
    # for room waits, one of the group's priority preempts a low workload elsewhere
    waits = env.state.decide(gw("next", gpusPerReplica=4))
    assert not waits.ok and not waits.victims, (waits.outcome, waits.placements)
    other = env.state.decide(gw("other", gpusPerReplica=4, priority=100,
                                schedulingStrategy="priority"))
    assert {p.node for p in other.placements}.isdisjoint(nodes), other.placements
    assert f"PodGroup:{NS}/label:urgent" not in other.victims, other.victims
    for v in victims:  # each victim's reconcile took in its eviction, its pods gone
        env.state.evicted(f"{NS}/{v}")
        env.state.departed(f"{NS}/{v}")
    for i in range(2):
        env.reconcile(f"urgent-{i}")
    bound = env.bound()
    assert sorted(bound) == ["urgent-0", "urgent-1"], bound
    assert {n for n, _ in bound.values()} == nodes
    assert env.state.view().allocation(f"PodGroup:{NS}/label:urgent").overlap == frozenset()


def test_a_group_of_no_higher_priority_evicts_nothing_and_says_why() -> None:
    env = full([low(f"w{n}", f"node{n}", priority=100) for n in range(1, 5)])
    place(env, "late")
    assert evicting(env, "w1", "w2", "w3", "w4") == dict.fromkeys(("w1", "w2", "w3", "w4"))
    assert env.bound() == {}
    why = env.warnings("late-1")[-1]
    assert why.startswith(f"pod group {NS}/label:late (2 of 2 members to place)"), why
    assert "lower priority than the group's 100 would not make room either" in why, why


def test_only_the_priority_strategy_preempts_and_not_against_a_policy_of_never() -> None:
    env = full([low(f"w{n}", f"node{n}") for n in range(1, 5)])
    place(env, "plain", strategy=None)  # leastLoaded, the default: it waits
    place(env, "polite", preemptionPolicy="Never")
    assert not any(evicting(env, "w1", "w2", "w3", "w4").values())
    assert env.warnings("plain-1") and env.bound() == {}
    assert "would not make room" not in env.warnings("plain-1")[-1]
    assert "says preemptionPolicy Never: the group preempts nobody" in \
        env.warnings("polite-1")[-1]


def test_without_an_admins_priority_a_group_takes_nobody_of_another_namespace() -> None:
    others = [low(f"w{n}", f"node{n}", ns="other") for n in range(1, 5)]
    env = full(others)
    place(env, "tenant")
    assert not any(env.state.eviction(f"other/w{n}") for n in range(1, 5))
    env2 = full(others)
    place(env2, "admin", priorityClassName="high")  # its priority an admin's class
    assert sum(bool(env2.state.eviction(f"other/w{n}")) for n in range(1, 5)) == 2


def bound_low_group(env: GroupEnv) -> None:
    """A group of 4 members x 4 GPUs, priority 0, bound on every node."""
    env.place("low", 4)
    env.show_bindings()  # the API server's part: nodeName, the annotation
    assert len(env.bound()) == 4
    env.client.bindings.clear()


def test_a_group_preempting_a_lower_group_evicts_every_member_of_it() -> None:
    env = full([])
    bound_low_group(env)
    place(env, "urgent")  # needs 2 nodes; the low group goes whole, all 4 members
    evicted = sorted(e["metadata"]["name"] for e in env.client.evictions)
    assert evicted == [f"low-{i}" for i in range(4)], evicted
    assert env.bound() == {}
    for i in range(4):  # the members go
        env.pods.delete(f"{NS}/low-{i}")
        env.reconcile(f"low-{i}")
    for i in range(2):
        env.reconcile(f"urgent-{i}")
    assert sorted(env.bound()) == ["urgent-0", "urgent-1"]


def test_a_budget_that_keeps_the_lower_group_books_nothing_and_evicts_nobody() -> None:
    env = full([])
    bound_low_group(env)
    env.client.budgets = [{"metadata": {"name": "keep"},
                           "spec": {"selector": {"matchLabels": {
                               "gpu.orchestrator.dev/pod-group": "low"}}},
                           "status": {"disruptionsAllowed": 1}}]
    place(env, "urgent")
    assert env.client.evictions == []
    assert env.state.view().allocation(f"PodGroup:{NS}/label:urgent") is None
    why = env.warnings("urgent-1")[-1]
    assert "PodDisruptionBudget ns/keep allows 1 disruption(s)" in why.replace(NS, "ns"), why
    assert "nothing is booked, nobody is evicted" in why


def test_a_member_that_finds_its_group_booked_under_the_lock_still_waits_for_the_victims(
) -> None:
    """Two members reconciled at once: the second read no booking of its own before
    the first booked the group (a nomination), and finds it under the lock; it
    waits for the victims as the first does, never binds beside them."""
    env = full([low(f"w{n}", f"node{n}") for n in range(1, 5)])
    for i in range(2):
        env.add(high("urgent", i))
    env.reconcile("urgent-0")  # books the group, nominated over two workloads
    assert env.book.entry(f"{NS}/urgent-1") is not None and env.bound() == {}
    entry, early = env.book.entry, [2]

    def read_before_the_booking(key: str) -> Any:
        if key == f"{NS}/urgent-1" and early[0]:
            early[0] -= 1  # its reads before the lock: before the other member booked
            return None
        return entry(key)
    env.book.entry = read_before_the_booking  # type: ignore[method-assign]
    env.reconcile("urgent-1")
    assert early[0] == 0 and env.bound() == {}, env.bound()


def test_a_workload_whose_preemption_a_group_budget_refuses_books_and_evicts_nothing() -> None:
    """A GPUWorkload that needs a GPUWorkload's node and a pod group's: the group's
    budget allows too few disruptions, so the preemption cannot happen whole. Its
    victims' budgets are asked before anything is booked: it waits
    (``PreemptionRefused``, no retry spent), nominated over nobody, and neither the
    group nor the GPUWorkload is asked to go. (Before, it booked first: the
    GPUWorkload victim was evicted for a preemption that never happened.)"""
    env = full([low("w1", "node1")])
    env.book.on_refusal = env.rec.holder_refusal  # as setup_podbinding_controller wires it
    env.place("low", 3)
    env.show_bindings()
    assert len(env.bound()) == 3
    env.client.budgets = [{"metadata": {"name": "keep"},
                           "spec": {"selector": {"matchLabels": {
                               "gpu.orchestrator.dev/pod-group": "low"}}},
                           "status": {"disruptionsAllowed": 1}}]
    w = gw("urgent", replicas=4, gpusPerReplica=4, priority=100,
           schedulingStrategy="priority")
    decision = env.state.decide(w)
    assert decision.wait_reason == "PreemptionRefused", decision
    assert "PodDisruptionBudget" in decision.message and "keep" in decision.message
    assert env.state.booking(w.key) is None
    assert env.state.eviction(f"{NS}/w1") is None  # the workload victim was not told
    assert env.client.evictions == []
