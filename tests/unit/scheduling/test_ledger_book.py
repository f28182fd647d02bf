"""The ledger's book through its public calls: a refused booking changes nothing,
capacity counts named and unnamed GPUs together, releasing one workload leaves the
others' holdings, questions about unknown nodes and keys have safe answers, the
free-capacity index answers in the order strategies rely on, and a restart keeps
priorities and bookings on nodes that are gone."""

from __future__ import annotations

import pytest

from api.v1alpha1.types import GPUWorkload, Phase, Placement
from internal.scheduling import FreeIndex, Ledger, LedgerConflict, schedule
from tests.unit.scheduling.helpers import cluster, node, workload


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def book(led: Ledger) -> dict[str, object]:
    """What a user could observe of the ledger on nodes n1 and n2."""
    return {
        n: (led.free_count(n), dict(led.holders(n)), dict(led.counted(n)))
        for n in ("n1", "n2")
    }


def ledger() -> Ledger:
    led = Ledger()
    led.set_node_devices("n1", range(4))
    led.set_node_devices("n2", range(4))
    return led


def test_a_refused_booking_changes_nothing() -> None:
    led = ledger()
    led.assume("a/x", [P(0, "n1", 0, 1)])
    led.assume("b/y", [P(0, "n2", 3)], priority=5)
    before = book(led)
    for placements, gpus in (
        ([P(0, "n2", 0), P(1, "n1", 1, 2)], 0),  # device 1 of n1 is a/x's
        ([P(0, "n1", 2), P(1, "n1", 3), P(2, "n1")], 1),  # 2 named + 1 counted > 2 free
        ([P(0, "n2", 9)], 0),  # no such device
        ([P(0, "n3", 0)], 0),  # no such node
    ):
        with pytest.raises(LedgerConflict):
            led.assume("c/z", placements, gpus_per_replica=gpus)
        assert book(led) == before and led.allocation("c/z") is None


def test_a_refused_rebooking_keeps_the_old_booking() -> None:
    led = ledger()
    led.assume("a/x", [P(0, "n1", 0)], priority=7)
    led.assume("b/y", [P(0, "n2", 0)])
    with pytest.raises(LedgerConflict):
        led.assume("a/x", [P(0, "n2", 0)], priority=7)
    assert led.holder("n1", 0) == "a/x" and led.priority_of("a/x") == 7


def test_named_and_counted_gpus_add_up_against_capacity() -> None:
    led = ledger()
    led.assume("a/x", [P(0, "n1", 0, 1, 2)])
    with pytest.raises(LedgerConflict):
        led.assume("b/y", [P(0, "n1")], gpus_per_replica=2)  # 1 free
    led.assume("b/y", [P(0, "n1")], gpus_per_replica=1)
    assert led.free_count("n1") == 0
    with pytest.raises(LedgerConflict):
        led.assume("c/z", [P(0, "n1", 3)])  # device 3 is unnamed but taken
    led.assume("d/w", [P(0, "n2"), P(1, "n2")], gpus_per_replica=2)
    assert led.free_count("n2") == 0


def test_a_device_plugin_booking_holds_per_replica() -> None:
    led = ledger()
    led.assume("a/x", [P(0, "n1"), P(1, "n1"), P(2, "n2")], gpus_per_replica=1)
    assert (led.free_count("n1"), led.free_count("n2")) == (2, 3)
    led.forget("a/x")
    assert (led.free_count("n1"), led.free_count("n2")) == (4, 4)


def test_forgetting_one_workload_leaves_the_others() -> None:
    led = ledger()
    led.assume("a/x", [P(0, "n1", 0), P(1, "n2", 0)])
    led.assume("b/y", [P(0, "n1", 1)])
    led.assume("c/z", [P(0, "n1")], gpus_per_replica=1)
    led.assume("d/w", [P(0, "n1")], gpus_per_replica=1)
    led.forget("a/x")
    assert dict(led.holders("n1")) == {1: "b/y"} and dict(led.holders("n2")) == {}
    assert led.free_count("n1") == 1 and led.free_count("n2") == 4
    led.forget("c/z")
    assert set(led.counted("n1")) == {"d/w"} and led.free_count("n1") == 2
    led.forget("d/w")
    led.forget("b/y")
    assert led.free_count("n1") == 4 and dict(led.counted("n1")) == {}
    assert led.allocations() == {}
    assert led.forget("b/y") is None  # twice: nothing to release
    led.assume("e/v", [P(0, "n1", 0, 1, 2, 3)])  # everything is free again
    assert led.free_count("n1") == 0


def test_unknown_nodes_and_keys() -> None:
    led = ledger()
    assert led.free_count("nowhere") == 0 and led.holder("nowhere", 0) is None
    assert led.usable("nowhere") == frozenset() and dict(led.holders("nowhere")) == {}
    assert led.priority_of("a/x") == 0 and not led.is_committed("a/x")
    with pytest.raises(KeyError):
        led.commit("a/x")
    led.assume("a/x", [P(0, "n1", 0)])
    assert led.priority_of("a/x") == 0  # a booking without a priority has the lowest
    assert not led.is_committed("a/x")
    led.commit("a/x")
    assert led.is_committed("a/x")


def test_a_removed_node_offers_nothing_but_keeps_its_holdings() -> None:
    led = ledger()
    led.assume("a/x", [P(0, "n1", 2)])
    led.remove_node("n1")
    assert led.free_count("n1") == 0 and led.holder("n1", 2) == "a/x"
    assert led.free_count("n2") == 4
    led.set_node_devices("n1", range(4))
    assert led.free_count("n1") == 3


# --------------------------------------------------------------- free index


def test_free_index() -> None:
    idx = FreeIndex()
    for name, free in (("c", 2), ("a", 2), ("b", 4), ("d", 0), ("e", 1)):
        idx.set(name, free)
    assert idx.get("b") == 4 and idx.get("nowhere") == 0
    assert list(idx.iter_nodes(2)) == ["b", "a", "c"]
    assert list(idx.iter_nodes(2, most_free_first=False)) == ["a", "c", "b"]
    assert idx.buckets(2) == [["b"], ["a", "c"]]
    assert idx.buckets(0) == [["b"], ["a", "c"], ["e"], ["d"]]
    assert idx.count_below(2) == 2 and idx.count_below(1) == 1
    idx.set("b", 1)
    idx.remove("c")
    idx.remove("nowhere")
    assert idx.buckets(1) == [["a"], ["b", "e"]] and len(idx) == 4
    assert "c" not in idx and idx.get("c") == 0
    assert idx.counts() == {2: 1, 1: 2, 0: 1}


# ---------------------------------------------------------------- restart


def committed(name: str, placements: list[Placement], **spec: object) -> GPUWorkload:
    w = workload(name, ns="ns", **spec)
    w.status.placements = placements
    w.status.phase = Phase.RUNNING
    return w


def test_a_restart_keeps_priorities() -> None:
    snap, _ = cluster(node("n1", 2))
    led, problems = Ledger.rebuild([committed("vip", [P(0, "n1", 0, 1)], priority="high",
                                              gpusPerReplica=2)], (), {"n1": range(2)})
    assert problems == [] and led.priority_of("ns/vip") == workload(priority="high").spec.priority
    snap.attach(led)
    w = workload("next", gpusPerReplica=2, priority=50, schedulingStrategy="priority")
    assert schedule(w, snap, led).victims == []  # "high" outranks 50 after the restart too


def test_a_restart_keeps_bookings_on_nodes_it_does_not_know_yet() -> None:
    w = committed("w", [P(0, "gone", 3)])
    led, problems = Ledger.rebuild([w], (), {"n1": range(4)})
    assert led.holder("gone", 3) == "ns/w" and led.is_committed("ns/w") and problems == []


def test_a_restart_books_every_workload_after_one_that_holds_nothing() -> None:
    ws = [committed("a-pending", []), committed("b", [P(0, "n1", 0)]),
          committed("c", [P(0, "n1", 1)])]
    led, problems = Ledger.rebuild(ws, (), {"n1": range(4)})
    assert (led.holder("n1", 0), led.holder("n1", 1)) == ("ns/b", "ns/c")
    assert led.allocation("ns/a-pending") is None and problems == []
