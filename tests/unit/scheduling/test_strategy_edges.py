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
from tests.unit.scheduling.helpers import cluster, gpunode, node, workload

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
            # 3 GPUs held without naming devices (device-plugin mode)
            led.assume(f"x/p{i}", [P(0, f"n{i:03d}")], gpus_per_replica=3)
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


# ------------------------------------------------------------- ties and search


@pytest.mark.parametrize("strategy", ["leastLoaded", "bestFit", "priority", "costOptimized"])
def test_ties_go_to_the_first_node_by_name(strategy: str) -> None:
    snap, led = cluster(node("b"), node("a"), node("c"))
    assert schedule(workload(), snap, led, strategy).nodes == ["a"]


def test_best_fit_finds_the_fullest_node_among_many() -> None:
    """More feasible nodes than bestFit gathers: it still looks fullest-first."""
    snap, led = cluster(*(node(f"n{i:02d}", 8) for i in range(40)))
    for i in range(39):
        used = 8 - (2 + i % 6)  # 2..7 free
        if used:
            led.assume(f"x/{i}", [P(0, f"n{i:02d}", *range(used))])
    led.assume("x/last", [P(0, "n39", *range(7))])  # n39: 1 free, too few
    d = schedule(workload(gpusPerReplica=2), snap, led, "bestFit")
    assert d.nodes == ["n00"]  # 2 free: the fullest that fits, first by name


def test_best_fit_compares_the_memory_of_the_devices_it_would_hand_out() -> None:
    mixed = gpunode("mixed", 4, memory=81920)
    for dev in mixed["status"]["devices"][:2]:
        dev["memoryTotalMiB"] = 24576  # devices 0, 1 small; 2, 3 large
    snap, led = cluster(node("mixed", 4), node("mid", 4),
                        gpunodes=(mixed, gpunode("mid", 4, memory=40960)))
    d = schedule(workload(), snap, led, "bestFit")
    assert d.placements == [P(0, "mixed", 0)]  # a 24 GiB GPU is the smallest that fits
    big = schedule(workload(minGPUMemoryMiB=30000), snap, led, "bestFit")
    assert big.placements == [P(0, "mid", 0)]  # 40 GiB beats mixed's 80 GiB devices


@pytest.mark.parametrize("seed", range(6))
def test_random_tries_every_node_with_room_before_giving_up(seed: int) -> None:
    """100 nodes with room on paper, 99 of them NotReady: the one Ready node is found."""
    nodes = [node(f"n{i:03d}", 2, ready=(i == 73)) for i in range(100)]
    snap, led = cluster(*nodes)
    d = schedule(workload(gpusPerReplica=2), snap, led, "random", random.Random(seed))
    assert d.nodes == ["n073"]
    assert d.visited <= 100


def test_a_scheduler_follows_its_rng() -> None:
    def picks(sched: Scheduler) -> list[str]:
        return [sched.schedule(workload(f"w{i}"), "random").nodes[0] for i in range(12)]

    def fresh(rng: random.Random | None = None) -> Scheduler:
        snap, led = cluster(*(node(f"n{i:02d}") for i in range(20)))
        return Scheduler(snap, led, rng=rng)

    seq = picks(fresh(random.Random(5)))
    assert picks(fresh(random.Random(5))) == seq  # reproducible
    assert len(set(seq)) > 3  # one RNG moving on, not one seed per decision
    assert picks(fresh(random.Random(6))) != seq  # the RNG given is the one used
    assert picks(fresh()) == picks(fresh(random.Random(0)))  # default: seeded with 0


def test_a_scheduler_tells_the_ledger_about_the_nodes_at_once() -> None:
    snap = Snapshot.build([node("a", 2), node("b", 3)])
    led = Ledger()
    Scheduler(snap, led)
    assert (led.free_count("a"), led.free_count("b")) == (2, 3)
