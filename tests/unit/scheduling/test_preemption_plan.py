"""Preemption plans through ``schedule`` with the priority strategy: enough victims
to fit, none that is not needed, the higher-priority ones spared first when several
sets would do, counted placements in device-plugin mode, and the booked priority that
later plans read."""

from __future__ import annotations

import pytest

from api.v1alpha1.types import Placement
from internal.scheduling import PREEMPT, UNSCHEDULABLE, schedule
from tests.unit.scheduling.helpers import cluster, node, workload


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def prio(name: str, priority: int, **spec: object):
    return workload(name, priority=priority, schedulingStrategy="priority", **spec)


def test_a_victim_made_unnecessary_by_a_later_one_is_dropped() -> None:
    snap, led = cluster(node("n1", 2), node("n2", 2))
    led.assume("x/a", [P(0, "n1", 0)], priority=1)
    led.assume("x/c", [P(0, "n1", 1)], priority=3)
    led.assume("x/b", [P(0, "n2", 0, 1)], priority=2)
    d = schedule(prio("hi", 10, gpusPerReplica=2), snap, led)
    # a alone is not enough; a + b fits (on n2), and then a is not needed
    assert d.outcome == PREEMPT
    assert d.victims == ["x/b"]
    assert d.placements == [P(0, "n2", 0, 1)]
    assert d.message.startswith("preempting lower-priority x/b to place; was: ")


def test_of_two_sufficient_sets_the_one_sparing_higher_priority_is_kept() -> None:
    # c holds a GPU on both nodes: a + c frees n1, b + c frees n2
    snap, led = cluster(node("n1", 2), node("n2", 2))
    led.assume("x/a", [P(0, "n1", 0)], priority=1)
    led.assume("x/b", [P(0, "n2", 0)], priority=2)
    led.assume("x/c", [P(0, "n1", 1), P(1, "n2", 1)], priority=3)
    d = schedule(prio("hi", 10, gpusPerReplica=2), snap, led)
    assert d.outcome == PREEMPT
    assert d.victims == ["x/a", "x/c"]  # b (priority 2) spared rather than a (1)
    assert d.placements == [P(0, "n1", 0, 1)]
    assert d.message.startswith("preempting lower-priority x/a, x/c to place; was: ")


def test_the_plan_counts_the_nodes_it_filtered() -> None:
    snap, led = cluster(node("n1", 2))
    led.assume("x/a", [P(0, "n1", 0)], priority=1)
    led.assume("x/b", [P(0, "n1", 1)], priority=2)
    d = schedule(prio("hi", 10, gpusPerReplica=2), snap, led)
    assert d.victims == ["x/a", "x/b"]
    # the search skips n1 (the index knows it is full), the explanation filters it
    # (1), then the plan: a (1), a + b (1), without b (1), without a (1)
    assert d.visited == 5


def test_device_plugin_mode_nominates_counted_placements() -> None:
    snap, led = cluster(node("n1", 2))
    low = workload("low", gpusPerReplica=2, deviceExposure="device-plugin")
    schedule(low, snap, led).assume(led, low)
    hi = prio("hi", 10, gpusPerReplica=2, deviceExposure="device-plugin")
    d = schedule(hi, snap, led)
    assert d.outcome == PREEMPT and d.victims == ["default/low"]
    assert d.counted and d.placements == [P(0, "n1")]


def test_an_assumed_decision_books_the_workloads_priority() -> None:
    snap, led = cluster(node("n1", 2))
    mid = prio("mid", 50, gpusPerReplica=2)
    schedule(mid, snap, led).assume(led, mid)
    assert led.priority_of("default/mid") == 50
    d = schedule(prio("hi", 40, gpusPerReplica=2), snap, led)
    assert d.outcome == UNSCHEDULABLE and d.victims == []  # 50 is not lower than 40
    assert schedule(prio("top", 60, gpusPerReplica=2), snap, led).victims == ["default/mid"]


def test_only_a_scheduled_decision_can_be_booked() -> None:
    snap, led = cluster(node("n1", 1))
    d = schedule(workload(gpusPerReplica=2), snap, led)
    with pytest.raises(ValueError, match="cannot assume a Unschedulable decision"):
        d.assume(led, workload(gpusPerReplica=2))
    assert led.allocations() == {}


def test_victims_are_looked_for_among_lower_priorities_only() -> None:
    snap, led = cluster(node("n1", 2), node("n2", 2))
    led.assume("x/equal", [P(0, "n1", 0, 1)], priority=10)
    led.assume("x/lower", [P(0, "n2", 0)], priority=9)
    led.assume("x/higher", [P(0, "n2", 1)], priority=11)
    d = schedule(prio("w", 10, gpusPerReplica=2), snap, led)
    assert d.outcome == UNSCHEDULABLE and d.victims == []
    d = schedule(prio("w", 10, gpusPerReplica=1), snap, led)
    assert d.victims == ["x/lower"] and d.placements == [P(0, "n2", 0)]


def test_without_an_admins_priority_only_the_own_namespace_is_preempted() -> None:
    """Issue 23, attack 1: a tenant-chosen priority (1e9) preempted another tenant.
    Without a priority an admin controls, only the preemptor's namespace yields."""
    snap, led = cluster(node("n1", 2))
    led.assume("team-b/bob", [P(0, "n1", 0, 1)], priority=50)
    alice = workload("a", ns="team-a", priority=1_000_000_000,
                     schedulingStrategy="priority", gpusPerReplica=2)
    d = schedule(alice, snap, led, across_namespaces=False)
    assert d.outcome == UNSCHEDULABLE and not d.victims
    led.forget("team-b/bob")
    led.assume("team-a/mine", [P(0, "n1", 0)], priority=1)
    led.assume("team-b/bob", [P(0, "n1", 1)], priority=50)
    d = schedule(alice, snap, led, across_namespaces=False)
    assert d.outcome == UNSCHEDULABLE  # team-a/mine alone does not free two GPUs
    # a priority an admin controls may take both
    assert schedule(alice, snap, led, across_namespaces=True).victims == [
        "team-a/mine", "team-b/bob"]


def test_booking_namespace_reads_workload_and_pod_book_keys() -> None:
    from internal.scheduling.preemption import booking_namespace
    assert booking_namespace("team-a/w") == "team-a"
    assert booking_namespace("StatefulSet:team-b/sts") == "team-b"
    assert booking_namespace("Pod:team-c/p-0") == "team-c"
