"""Strategy edges: a node with exactly the GPUs needed is taken by every strategy,
the index keeps decisions cheap for every strategy, the registry refuses nameless
and duplicate strategies and takes a new one, and priority order breaks ties by age.
Plus the map parser's error attributes."""

from __future__ import annotations

import random
from typing import ClassVar

import pytest

from api.v1alpha1.types import Placement
from internal.scheduling import Ledger, Scheduler, Snapshot, names, schedule
from internal.scheduling.framework import order_by_priority
from internal.scheduling.mapparser import MapParseError, check_map_against, parse_scheduling_map
from internal.scheduling.snapshot import COST_LABEL
from internal.scheduling.strategies import base
from internal.scheduling.strategies.least_loaded import LeastLoaded
from tests.unit.scheduling.helpers import cluster, node, workload

SEARCH = [s for s in names() if s != "annotationMap"]


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


@pytest.mark.parametrize("strategy", SEARCH)
def test_a_node_with_exactly_the_gpus_needed_is_taken(strategy: str) -> None:
    snap, led = cluster(node("a", 4), node("b", 4))
    led.assume("x/a", [P(0, "a", 0, 1)])
    led.assume("x/b", [P(0, "b", 0, 1, 2)])
    d = schedule(workload(gpusPerReplica=2), snap, led, strategy, random.Random(1))
    assert d.placements == [P(0, "a", 2, 3)]


@pytest.mark.parametrize("strategy", SEARCH)
def test_a_gang_filling_the_cluster_exactly(strategy: str) -> None:
    snap, led = cluster(node("a", 2), node("b", 2), node("c", 2))
    d = schedule(workload(replicas=3, gpusPerReplica=2), snap, led, strategy, random.Random(3))
    assert d.ok
    assert sorted((p.node, tuple(p.devices)) for p in d.placements) == [
        ("a", (0, 1)), ("b", (0, 1)), ("c", (0, 1))]


@pytest.mark.parametrize("strategy", SEARCH)
def test_full_nodes_are_not_filtered(strategy: str) -> None:
    """200 nodes, all but two full: a decision runs the filters on few nodes."""
    led = Ledger()
    snap = Snapshot.build((node(f"n{i:03d}", 4, labels={COST_LABEL: str(i % 5)})
                           for i in range(200)), (), led)
    for i in range(200):
        if i not in (57, 140):
            led.set_foreign_pod(f"ns/p{i}", f"n{i:03d}", 3)
    d = schedule(workload(gpusPerReplica=2), snap, led, strategy, random.Random(0))
    assert d.nodes in (["n057"], ["n140"])
    assert d.visited <= 2, d.visited


def test_round_robin_starts_from_the_first_node_and_wraps() -> None:
    snap, led = cluster(node("a", 1), node("b", 1), node("c", 1))
    sched = Scheduler(snap, led)
    got = []
    for i in range(4):
        d = sched.schedule(workload(f"w{i}", schedulingStrategy="roundRobin"))
        got.append(d.nodes[0])
    assert got == ["a", "b", "c", "a"]


# ------------------------------------------------------------------- registry


class _Nameless(LeastLoaded):
    name: ClassVar[str] = ""


def test_a_strategy_needs_a_name() -> None:
    with pytest.raises(ValueError, match="_Nameless has no name"):
        base.register(_Nameless)


def test_a_name_cannot_be_taken_twice() -> None:
    class Impostor(LeastLoaded):
        name = "bestFit"

    with pytest.raises(ValueError, match="strategy 'bestFit' registered twice"):
        base.register(Impostor)
    assert type(base.create("bestFit")).__name__ == "BestFit"
    assert base.register(LeastLoaded) is LeastLoaded  # the same class again is fine


def test_a_new_strategy_is_created_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # undone after the test

    @base.register
    class FirstFeasible(base.Strategy):
        name = "firstFeasible"
        limit = 1

    assert "firstFeasible" in base.names()
    assert isinstance(base.create("firstFeasible"), FirstFeasible)
    snap, led = cluster(node("a", 1), node("b", 2))
    d = schedule(workload(gpusPerReplica=2), snap, led, "firstFeasible")
    assert d.nodes == ["b"] and d.strategy == "firstFeasible"


def test_an_unknown_strategy_name_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="unknown scheduling strategy 'fastest'; known: "):
        base.create("fastest")


# ------------------------------------------------------------------- priority order


def test_priority_order_then_oldest_then_key() -> None:
    def w(name: str, prio: int, created: str):
        out = workload(name, priority=prio)
        out.metadata.creation_timestamp = created
        return out

    ws = [w("young", 10, "2025-01-02T00:00:00Z"), w("old", 10, "2025-01-01T00:00:00Z"),
          w("b-twin", 10, "2025-01-01T00:00:00Z"), w("high", 20, "2025-01-03T00:00:00Z"),
          w("a-twin", 10, "2025-01-01T00:00:00Z")]
    assert [x.metadata.name for x in order_by_priority(ws)] == [
        "high", "a-twin", "b-twin", "old", "young"]


# --------------------------------------------------------------------- map parser


def test_map_errors_carry_the_line_number_and_text() -> None:
    with pytest.raises(MapParseError) as e:
        parse_scheduling_map("0=node1:0\n  1=node2  \n")
    assert (e.value.line, e.value.text) == (2, "  1=node2  ")
    with pytest.raises(MapParseError) as e:
        parse_scheduling_map("\n \n")
    assert (e.value.line, e.value.text) == (0, "")
    assert str(e.value) == "scheduling map is empty"


def test_map_check_lists_every_missing_replica_and_device() -> None:
    entries = parse_scheduling_map("1=a:4,5,3\n4=b:0")
    assert check_map_against(entries, 4, {"a": 4, "b": 1}) == [
        "line 2: replica index 4 >= replicas (4)",
        "no map entry for replica(s) 0, 2, 3",
        "line 1: device 4, 5 beyond node a's 4 GPU(s)",
    ]
    assert check_map_against(entries, 5, None) == ["no map entry for replica(s) 0, 2, 3"]
