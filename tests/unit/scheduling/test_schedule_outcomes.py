"""``schedule`` and ``Scheduler`` outcomes as the controller reads them: the decision's
fields, the message per outcome, the explanation of a failed decision for small and
large clusters, the exposure mode, and the strategy's state across decisions."""

from __future__ import annotations

import random

from api.v1alpha1.types import DeviceExposure, Placement
from internal.scheduling import UNSCHEDULABLE, Ledger, Scheduler, Snapshot, group_reasons, schedule
from internal.scheduling.framework import EXPLAIN_ALL_BELOW, INVALID_MAP, SCHEDULED
from tests.unit.scheduling.helpers import cluster, node, workload


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def test_a_placed_decision() -> None:
    snap, led = cluster(node("a", 2), node("b", 4))
    d = schedule(workload(replicas=2, gpusPerReplica=2), snap, led, "bestFit")
    assert d.outcome == SCHEDULED and d.strategy == "bestFit"
    assert d.placements == [P(0, "a", 0, 1), P(1, "b", 0, 1)]
    assert d.message == "placed 2 replica(s) on a, b"
    assert (d.counted, d.gpus_per_replica, d.gpus_total) == (False, 2, 4)
    assert d.reasons == {} and d.victims == []
    assert d.visited >= 2


def test_device_plugin_decisions_are_counted() -> None:
    snap, led = cluster(node("a", 4))
    d = schedule(workload(replicas=3, gpusPerReplica=1, deviceExposure="device-plugin"),
                 snap, led)
    assert d.counted and d.placements == [P(0, "a"), P(1, "a"), P(2, "a")]
    assert (d.gpus_per_replica, d.gpus_total) == (1, 3)


def test_the_default_exposure_applies_to_workloads_that_do_not_say() -> None:
    snap, led = cluster(node("a", 4))
    plugin = DeviceExposure.DEVICE_PLUGIN
    d = schedule(workload(gpusPerReplica=2), snap, led, default_exposure=plugin)
    assert d.counted and d.placements == [P(0, "a")]
    own = workload(gpusPerReplica=2, deviceExposure="cuda-visible-devices")
    assert schedule(own, snap, led, default_exposure=plugin).placements == [P(0, "a", 0, 1)]
    sched = Scheduler(snap, led, default_exposure=plugin)
    assert sched.schedule(workload(gpusPerReplica=2)).counted


def test_a_map_names_devices_even_in_device_plugin_mode() -> None:
    snap, led = cluster(node("a", 4))
    w = workload(schedulingStrategy="annotationMap", schedulingMap="0=a:2",
                 deviceExposure="device-plugin")
    d = schedule(w, snap, led)
    assert not d.counted and d.placements == [P(0, "a", 2)] and d.gpus_total == 1


def test_an_invalid_map_decision() -> None:
    snap, led = cluster(node("a", 4))
    d = schedule(workload(schedulingStrategy="annotationMap", schedulingMap="0=a"), snap, led)
    assert d.outcome == INVALID_MAP and d.strategy == "annotationMap"
    assert d.placements == [] and d.reasons == {} and d.victims == []


def test_the_workloads_own_strategy_is_used_by_default() -> None:
    snap, led = cluster(node("a", 4), node("b", 4))
    led.assume("x/a", [P(0, "a", 0)])
    assert schedule(workload(schedulingStrategy="bestFit"), snap, led).nodes == ["a"]
    assert schedule(workload(schedulingStrategy="leastLoaded"), snap, led).nodes == ["b"]
    assert schedule(workload(schedulingStrategy="leastLoaded"), snap, led, "bestFit").nodes == [
        "a"]


def test_schedule_tells_a_new_ledger_about_the_nodes() -> None:
    snap = Snapshot.build([node("a", 2)])
    led = Ledger()
    d = schedule(workload(gpusPerReplica=2), snap, led)
    assert d.ok and snap.ledger is led and led.free_count("a") == 2


def test_the_random_strategy_is_seeded_by_default() -> None:
    snap, led = cluster(*(node(f"n{i}") for i in range(12)))
    first = schedule(workload(), snap, led, "random").nodes
    assert all(schedule(workload(), snap, led, "random").nodes == first for _ in range(5))
    assert schedule(workload(), snap, led, "random", random.Random(0)).nodes == first


def test_a_scheduler_keeps_one_strategy_per_name() -> None:
    snap, led = cluster(node("a", 1), node("b", 1), node("c", 1))
    sched = Scheduler(snap, led)
    assert sched.strategy("roundRobin") is sched.strategy("roundRobin")
    got = [sched.schedule(workload(f"w{i}"), "roundRobin").nodes[0] for i in range(3)]
    assert got == ["a", "b", "c"]
    # a failed decision does not move the cursor
    assert not sched.schedule(workload("big", gpusPerReplica=2), "roundRobin").ok
    assert sched.schedule(workload("next"), "roundRobin").nodes == ["a"]


def test_a_gang_that_does_not_fit_books_nothing_and_moves_no_cursor() -> None:
    snap, led = cluster(node("a", 2), node("b", 2))
    sched = Scheduler(snap, led)
    d = sched.schedule(workload("g", replicas=3, gpusPerReplica=2, schedulingStrategy="roundRobin"))
    assert d.outcome == UNSCHEDULABLE and d.placements == []
    assert d.message == ("gang of 3 x 2 GPU(s) does not fit, nothing booked: "
                         "a, b: 2 free GPUs, room for 1 of 3 replicas")
    assert sched.schedule(workload("one", schedulingStrategy="roundRobin")).nodes == ["a"]


# --------------------------------------------------------------- explanations


def test_a_single_replica_that_does_not_fit_names_each_node() -> None:
    snap, led = cluster(node("a", 1), node("b", 2, ready=False))
    d = schedule(workload(gpusPerReplica=2), snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.message == "a: 1 free GPU, needs 2; b: NotReady"
    assert d.reasons == {"a": "1 free GPU, needs 2", "b": "NotReady"}
    assert d.counted is False and d.gpus_per_replica == 2


def test_room_is_counted_in_whole_replicas() -> None:
    snap, led = cluster(node("a", 5), node("b", 3))
    d = schedule(workload(replicas=4, gpusPerReplica=2), snap, led)
    assert d.reasons == {"a": "5 free GPUs, room for 2 of 4 replicas",
                         "b": "3 free GPUs, room for 1 of 4 replicas"}


def test_a_small_cluster_explains_every_node() -> None:
    n = EXPLAIN_ALL_BELOW  # full nodes the index skipped: explained up to this many
    snap, led = cluster(*(node(f"n{i:02d}", 1) for i in range(n)))
    for i in range(n):
        led.assume(f"x/{i}", [P(0, f"n{i:02d}", 0)])
    d = schedule(workload(), snap, led)
    assert len(d.reasons) == n
    assert d.message == f"n00, n01, n02 and {n - 3} more: 0 free GPUs, needs 1"


def test_a_large_cluster_summarises_the_nodes_it_skipped() -> None:
    n = EXPLAIN_ALL_BELOW + 1
    snap, led = cluster(*(node(f"n{i:02d}", 1) for i in range(n)))
    for i in range(n):
        led.assume(f"x/{i}", [P(0, f"n{i:02d}", 0)])
    d = schedule(workload(), snap, led)
    assert d.reasons == {}
    assert d.message == f"{n} other nodes: fewer than 1 free GPU"
    assert d.visited == 0  # nothing worth filtering


def test_group_reasons_wording() -> None:
    assert group_reasons({}) == "no nodes"
    assert group_reasons({}, others=1, need=1) == "1 other node: fewer than 1 free GPU"
    assert group_reasons({"b": "x", "a": "y", "c": "x"}) == "a: y; b, c: x"
    four = {f"n{i}": "NotReady" for i in range(4)}
    assert group_reasons(four, max_names=4) == "n0, n1, n2, n3: NotReady"
    assert group_reasons(four, max_names=2) == "n0, n1 and 2 more: NotReady"
