"""A strategy that scores no devices (leastLoaded, priority, costOptimized) has the
devices picked on the node it chose only, not on each feasible node it compared:
the same placements, reasons and outcome as picking them everywhere."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.v1alpha1.types import Placement
from internal.scheduling import SCHEDULED, schedule
from internal.scheduling import filters as filters_mod
from internal.scheduling.strategies.cost_optimized import CostOptimized
from internal.scheduling.strategies.least_loaded import LeastLoaded
from tests.unit.scheduling.helpers import cluster, gpunode, node, workload


class PickEverywhere(LeastLoaded):
    """leastLoaded as it was: the devices picked on every feasible node."""
    name = ""
    reads_devices = True


class CostPickEverywhere(CostOptimized):
    name = ""
    reads_devices = True


def _picks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = filters_mod.pick_devices

    def spy(free: Any, n: int, **kw: Any) -> Any:
        calls.append(n)
        return real(free, n, **kw)

    monkeypatch.setattr(filters_mod, "pick_devices", spy)
    return calls


def test_one_pick_per_replica_on_the_chosen_node(monkeypatch: pytest.MonkeyPatch) -> None:
    snap, led = cluster(*(node(f"n{i}", 8) for i in range(10)))
    calls = _picks(monkeypatch)
    d = schedule(workload(gpusPerReplica=2, replicas=3), snap, led, "leastLoaded")
    assert d.outcome == SCHEDULED
    assert calls == [2, 2, 2]  # not one per feasible node (10 of them, each replica)


def test_a_topology_set_is_picked_on_every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """An NVLink set may not exist where the count fits: each node's pick decides
    (a, the most free, is visited first and has no linked pair free)."""
    links = {0: [1], 1: [0], 2: [3], 3: [2]}
    snap, led = cluster(node("a"), node("b"),
                        gpunodes=(gpunode("a", links={0: [1], 1: [0]}),
                                  gpunode("b", links=links)))
    led.assume("x/o", [Placement(index=0, node="a", devices=[1])])  # a: 0, 2, 3 unlinked
    led.assume("x/p", [Placement(index=0, node="b", devices=[0, 1])])  # b: 2, 3 linked
    calls = _picks(monkeypatch)
    d = schedule(workload(gpusPerReplica=2, topology="Required"), snap, led, "leastLoaded")
    assert [(p.node, p.devices) for p in d.placements] == [("b", [2, 3])]
    assert len(calls) == 2


NODES = st.lists(st.tuples(st.integers(1, 8), st.sampled_from([40960, 81920]),
                           st.sets(st.integers(0, 7), max_size=6)), min_size=1, max_size=6)
SPECS = st.fixed_dictionaries({
    "gpusPerReplica": st.integers(1, 4), "replicas": st.integers(1, 4),
    "topology": st.sampled_from(["None", "Preferred", "Required"]),
    "minGPUMemoryMiB": st.sampled_from([0, 50000]),
})


@settings(max_examples=60, deadline=None)
@given(nodes=NODES, spec=SPECS, cost=st.booleans())
def test_the_same_decision_as_picking_everywhere(
        nodes: list[tuple[int, int, set[int]]], spec: dict[str, Any], cost: bool) -> None:
    links = {0: [1], 1: [0], 2: [3], 3: [2], 4: [5], 5: [4]}
    snap, led = cluster(*(node(f"n{i}", g) for i, (g, _, _) in enumerate(nodes)),
                        gpunodes=tuple(gpunode(f"n{i}", g, memory=m,
                                               links={k: v for k, v in links.items() if k < g}
                                               if i % 2 else None)
                                       for i, (g, m, _) in enumerate(nodes)))
    for i, (g, _, held) in enumerate(nodes):
        devs = sorted(d for d in held if d < g)
        if devs:
            led.assume(f"x/h{i}", [Placement(index=0, node=f"n{i}", devices=devs)])
    w = workload(**spec)
    fast, slow = (CostOptimized(), CostPickEverywhere()) if cost else \
        (LeastLoaded(), PickEverywhere())
    a, b = schedule(w, snap, led, fast), schedule(w, snap, led, slow)
    assert (a.outcome, a.message, a.reasons) == (b.outcome, b.message, b.reasons)
    assert [(p.index, p.node, p.devices) for p in a.placements] == \
        [(p.index, p.node, p.devices) for p in b.placements]
