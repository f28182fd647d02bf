"""A leastLoaded search stops once no node left could win (its
``ceiling``): the nodes come most free first from the free-capacity index, a node
can score at most (0% busy, its free GPUs less the replica's), and ties go to the
earlier node. The same decision as gathering ``limit`` feasible nodes; fewer nodes
filtered (``Decision.visited``)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from api.v1alpha1.types import Placement
from internal.scheduling import SCHEDULED, Ledger, schedule
from internal.scheduling.ledger import booking_owner
from internal.scheduling.strategies.least_loaded import LeastLoaded
from internal.scheduling.strategies.priority import Priority
from tests.unit.scheduling.helpers import cluster, node, workload


class Gathering(LeastLoaded):
    """leastLoaded without a ceiling: ``limit`` feasible nodes gathered, as before."""
    name = ""

    def ceiling(self, free: int, ctx: Any) -> None:
        return None


def busy(name: str, gpus: int, utilization: int) -> dict[str, Any]:
    """The GPUNode of ``name``: ``gpus`` devices, each ``utilization`` percent busy."""
    return {"metadata": {"name": name},
            "status": {"devices": [{"index": i, "uuid": f"GPU-{name}-{i}",
                                    "memoryTotalMiB": 81920, "utilization": utilization}
                                   for i in range(gpus)]}}


def test_an_empty_cluster_places_a_one_gpu_unit_after_filtering_one_node() -> None:
    """The benchmark's unit: the first node of the index wins, and no node after it
    could beat it (fails before the ceiling: every one of 32 feasible nodes was
    filtered and scored)."""
    snap, led = cluster(*(node(f"n{i:02d}", 8) for i in range(40)))
    d = schedule(workload(gpusPerReplica=1), snap, led, "leastLoaded")
    full = schedule(workload(gpusPerReplica=1), snap, led, Gathering())
    assert d.outcome == SCHEDULED and d.nodes == full.nodes == ["n00"]
    assert d.placements == full.placements
    assert (d.visited, full.visited) == (1, 32)  # was 32: leastLoaded's limit


def test_a_less_busy_node_further_down_the_index_still_wins() -> None:
    """n0 has the most free GPUs but is 60% busy: every node is filtered until one
    that is idle, n2, cannot be beaten by the ones after it."""
    snap, led = cluster(node("n0", 8), node("n1", 4), node("n2", 4), node("n3", 4),
                        gpunodes=(busy("n0", 8, 60), busy("n1", 4, 30)))
    d = schedule(workload(gpusPerReplica=1), snap, led, "leastLoaded")
    assert d.nodes == ["n2"] and d.visited == 3


def test_the_workloads_own_holdings_free_a_node_the_index_counts_as_taken() -> None:
    """The index counts the workload's own pods on n1 as taken; for the workload
    they are free (the same owner), so n1 has the most room: no early stop."""
    w = workload(gpusPerReplica=1)
    snap, led = cluster(node("n0", 4), node("n1", 4))
    led.assume("x/o", [Placement(index=0, node="n0", devices=[0])])  # n0: 3 free
    led.assume("pod:own", [Placement(index=0, node="n1", devices=[0, 1])],
               owner=booking_owner(w))  # n1: 2 free in the index, 4 for w
    d = schedule(w, snap, led, "leastLoaded")
    assert d.nodes == ["n1"] == schedule(w, snap, led, Gathering()).nodes


def test_the_ledger_knows_who_holds_anything_as_holders_come_and_go() -> None:
    led = Ledger()
    led.set_node_devices("n0", range(4))
    assert not led.holds_any({"a"})
    led.assume("ns/a", [Placement(index=0, node="n0", devices=[0])], owner="a")
    led.assume("ns/a2", [Placement(index=0, node="n0", devices=[1])], owner="a")
    assert led.holds_any({"a"}) and led.holds_any({"b", "a"}) and not led.holds_any({"b"})
    led.forget("ns/a")
    assert led.holds_any({"a"})
    led.assume("ns/a2", [Placement(index=0, node="n0", devices=[2])], owner="b")  # rebooked
    assert not led.holds_any({"a"}) and led.holds_any({"b"})
    led.forget("ns/a2")
    assert not led.holds_any({"a", "b"})


NODES = st.lists(st.tuples(st.integers(1, 8), st.sampled_from([0, 0, 0, 10, 49, 51, 90]),
                           st.sets(st.integers(0, 7), max_size=6), st.booleans()),
                 min_size=1, max_size=40)
SPECS = st.fixed_dictionaries({
    "gpusPerReplica": st.integers(1, 4), "replicas": st.sampled_from([1, 1, 2, 3]),
    "topology": st.sampled_from(["None", "None", "Required"]),
    "deviceExposure": st.sampled_from(["cuda-visible-devices", "device-plugin"]),
})


@settings(max_examples=150, deadline=None)
@given(nodes=NODES, spec=SPECS, own=st.booleans(), priority=st.booleans())
def test_the_same_decision_as_gathering_limit_feasible_nodes(
        nodes: list[tuple[int, int, set[int], bool]], spec: dict[str, Any], own: bool,
        priority: bool) -> None:
    """Nodes of 1-8 GPUs, some reported busy, some held (by others, or by the
    workload's own owner), named or counted: the same outcome, message, reasons and
    placements as the search that gathers ``limit`` feasible nodes."""
    w = workload(**spec)
    snap, led = cluster(*(node(f"n{i:02d}", g) for i, (g, _, _, _) in enumerate(nodes)),
                        gpunodes=tuple(busy(f"n{i:02d}", g, u)
                                       for i, (g, u, _, _) in enumerate(nodes) if u))
    for i, (g, _, held, mine) in enumerate(nodes):
        devs = sorted(d for d in held if d < g)
        if devs and spec["deviceExposure"] == "device-plugin":
            led.assume(f"x/h{i}", [Placement(index=0, node=f"n{i:02d}", devices=[])],
                       gpus_per_replica=len(devs), check_capacity=False,
                       owner=booking_owner(w) if own and mine else "")
        elif devs:
            led.assume(f"x/h{i}", [Placement(index=0, node=f"n{i:02d}", devices=devs)],
                       owner=booking_owner(w) if own and mine else "")
    stopping = Priority() if priority else LeastLoaded()
    a, b = schedule(w, snap, led, stopping), schedule(w, snap, led, Gathering())
    assert (a.outcome, a.message, a.reasons) == (b.outcome, b.message, b.reasons)
    assert [(p.index, p.node, p.devices) for p in a.placements] == \
        [(p.index, p.node, p.devices) for p in b.placements]
    assert a.visited <= b.visited
