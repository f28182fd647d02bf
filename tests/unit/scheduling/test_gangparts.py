"""A gang of parts (internal/scheduling/gangparts.py, through ``framework.schedule``'s
``then``): each part searched as its own shape against one view, so no part takes
what an earlier one took; all or nothing; indices running on across the parts; the
first part that does not fit named; a preemption whose trials search every part."""

from __future__ import annotations

from api.v1alpha1.types import Placement
from internal.scheduling.framework import PREEMPT, SCHEDULED, UNSCHEDULABLE, schedule
from internal.scheduling.gangparts import shape
from internal.scheduling.strategies import create
from tests.unit.scheduling.helpers import cluster, node, workload


def pools() -> tuple:
    """a1 and b1, b2 of 4 GPUs; pool a and pool b by label."""
    return cluster(node("a1", 4, labels={"pool": "a"}), node("b1", 4, labels={"pool": "b"}),
                   node("b2", 4, labels={"pool": "b"}))


def part(gpus: int, replicas: int, pool: str, **spec: object):
    return workload("g", ns="x", gpusPerReplica=gpus, replicas=replicas,
                    nodeSelector={"pool": pool}, **spec)


def test_each_part_goes_where_its_own_shape_says_and_indices_run_on() -> None:
    snap, led = pools()
    d = schedule(part(1, 1, "a"), snap, led, then=[part(4, 2, "b")])
    assert d.outcome == SCHEDULED, d.message
    assert d.placements[0] == Placement(index=0, node="a1", devices=[0])
    assert {(p.node, len(p.devices)) for p in d.placements[1:]} == {("b1", 4), ("b2", 4)}
    assert [p.index for p in d.placements] == [0, 1, 2]


def test_a_later_part_never_takes_what_an_earlier_part_took() -> None:
    """Both parts fit pool b's 8 GPUs only together: 1 x 4 then 2 x 2, on b1 and b2,
    every device once."""
    snap, led = pools()
    d = schedule(part(4, 1, "b"), snap, led, then=[part(2, 2, "b")])
    assert d.ok, d.message
    held = [(p.node, dev) for p in d.placements for dev in p.devices]
    assert len(held) == 8 and len(set(held)) == 8, held


def test_when_a_part_does_not_fit_nothing_is_placed_and_the_part_is_named() -> None:
    snap, led = pools()
    d = schedule(part(1, 1, "a"), snap, led, then=[part(4, 3, "b")])
    assert d.outcome == UNSCHEDULABLE and d.placements == []
    assert d.message.startswith(
        "gang of 1 x 1 + 3 x 4 GPU(s) does not fit, nothing booked: part 2 (3 x 4 GPU(s), "
        "after the 1 replica(s) of the part(s) before it): "), d.message
    assert "a1: does not match nodeSelector pool=b" in d.message, d.message


def test_the_first_part_not_fitting_is_said_without_parts_before_it() -> None:
    snap, led = pools()
    d = schedule(part(8, 1, "a"), snap, led, then=[part(1, 1, "b")])
    assert "nothing booked: part 1 (1 x 8 GPU(s)): " in d.message, d.message


def test_a_preemption_of_a_gang_of_parts_takes_only_what_its_shapes_need() -> None:
    """Every node held whole at priority 0; a priority-10 gang of 1 x 4 GPUs then
    4 x 1 GPU needs two nodes (5 x 4 would need five): two victims, each part
    nominated with its own count."""
    snap, led = cluster(*(node(f"n{i}", 4) for i in range(1, 5)))
    for i in range(1, 5):
        led.assume(f"x/low{i}", [Placement(index=0, node=f"n{i}", devices=[0, 1, 2, 3])],
                   priority=0)
    first = workload("g", ns="x", gpusPerReplica=4, priority=10)
    later = workload("g", ns="x", gpusPerReplica=1, replicas=4, priority=10)
    d = schedule(first, snap, led, create("priority"), then=[later])
    assert d.outcome == PREEMPT, d.message
    assert len(d.victims) == 2, d.victims
    assert sorted(len(p.devices) for p in d.placements) == [1, 1, 1, 1, 4]
    assert [p.index for p in d.placements] == [0, 1, 2, 3, 4]


def test_shape_says_each_part() -> None:
    assert shape([part(1, 1, "a"), part(4, 2, "b")]) == "1 x 1 + 2 x 4 GPU(s)"


def test_a_gang_of_parts_that_fits_is_placed_whatever_the_order_of_its_parts() -> None:
    """Three empty nodes and one with 1 GPU free; a launcher of 1 GPU, then 3 workers
    of 4: it fits only with the launcher on the 1 free GPU. leastLoaded (the pod
    binding's default) sends a 1-GPU replica to the most free node, so the launcher,
    searched first, took an empty node and the workers found two: a group refused,
    holding nothing, while the nodes had room for it (a JobSet stuck for ever)."""
    snap, led = cluster(*(node(f"n{i}", 4) for i in range(1, 5)))
    led.assume("x/other", [Placement(index=0, node="n4", devices=[0, 1, 2])], priority=0)
    launcher = workload("g", ns="x", gpusPerReplica=1)
    workers = workload("g", ns="x", gpusPerReplica=4, replicas=3)
    d = schedule(launcher, snap, led, create("leastLoaded"), then=[workers])
    assert d.outcome == SCHEDULED, d.message
    assert [p.index for p in d.placements] == [0, 1, 2, 3], d.placements
    assert (d.placements[0].node, len(d.placements[0].devices)) == ("n4", 1), d.placements
    assert {(p.node, len(p.devices)) for p in d.placements[1:]} == {
        ("n1", 4), ("n2", 4), ("n3", 4)}, d.placements
    held = [(p.node, dev) for p in d.placements for dev in p.devices]
    assert len(held) == 13 and len(set(held)) == 13, held
