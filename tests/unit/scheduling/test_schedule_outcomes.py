"""``schedule`` and ``Scheduler`` outcomes as the controller reads them: the decision's
fields, the message per outcome, the explanation of a failed decision for small and
large clusters, the exposure mode, and the strategy's state across decisions."""

from __future__ import annotations

import random

import pytest

from api.v1alpha1.types import DeviceExposure, Placement
from internal.scheduling import UNSCHEDULABLE, Ledger, Scheduler, Snapshot, group_reasons, schedule
from internal.scheduling.framework import EXPLAIN_ALL_BELOW, INVALID_MAP, SCHEDULED
from tests.unit.scheduling.helpers import cluster, gpunode, node, workload


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
    assert d.counted is False and d.gpus_per_replica == 2 and d.strategy == "leastLoaded"


def test_room_is_counted_in_whole_replicas() -> None:
    snap, led = cluster(node("a", 5), node("b", 3))
    d = schedule(workload(replicas=4, gpusPerReplica=2), snap, led)
    assert d.reasons == {"a": "5 free GPUs, room for 2 of 4 replicas",
                         "b": "3 free GPUs, room for 1 of 4 replicas"}
    d = schedule(workload(replicas=9, gpusPerReplica=1), snap, led)
    assert d.reasons == {"a": "5 free GPUs, room for 5 of 9 replicas",
                         "b": "3 free GPUs, room for 3 of 9 replicas"}


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
    assert group_reasons({}, others=2) == "2 other nodes: fewer than 0 free GPUs"
    assert group_reasons({"b": "x", "a": "y", "c": "x"}) == "a: y; b, c: x"
    four = {f"n{i}": "NotReady" for i in range(4)}
    assert group_reasons(four, max_names=4) == "n0, n1, n2, n3: NotReady"
    assert group_reasons(four, max_names=2) == "n0, n1 and 2 more: NotReady"


def test_a_decision_counts_every_node_it_filtered() -> None:
    snap, led = cluster(node("a", 1), node("b", 2, ready=False))
    d = schedule(workload(gpusPerReplica=2), snap, led)
    # the search filters b (a has too few GPUs for the index), the explanation both
    assert d.visited == 3


@pytest.mark.parametrize("strategy", ["roundRobin", "random"])
def test_first_feasible_strategies_filter_one_node(strategy: str) -> None:
    snap, led = cluster(*(node(f"n{i}") for i in range(4)))
    d = schedule(workload(), snap, led, strategy)
    assert d.ok and d.visited == 1


def test_a_workload_rescheduled_may_reuse_what_it_holds() -> None:
    snap, led = cluster(node("a", 4))
    w = workload("w", gpusPerReplica=2)
    schedule(w, snap, led).assume(led, w)  # holds 0, 1
    again = schedule(w, snap, led)
    assert again.placements == [P(0, "a", 0, 1)]  # its own devices are free to it
    bigger = workload("w", replicas=3, gpusPerReplica=2)
    d = schedule(bigger, snap, led)
    assert d.reasons == {"a": "4 free GPUs, room for 2 of 3 replicas"}


def test_a_device_plugin_gang_never_overcommits_a_node() -> None:
    snap, led = cluster(node("a", 2))
    d = schedule(workload(replicas=3, deviceExposure="device-plugin"), snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.message == ("gang of 3 x 1 GPU(s) does not fit, nothing booked: "
                         "a: 2 free GPUs, room for 2 of 3 replicas")
    two = schedule(workload(replicas=2, deviceExposure="device-plugin"), snap, led)
    assert two.placements == [P(0, "a"), P(1, "a")]


def test_device_plugin_explanations_count_gpus() -> None:
    snap, led = cluster(node("a", 1))
    d = schedule(workload(gpusPerReplica=2, minGPUMemoryMiB=1000,
                          deviceExposure="device-plugin"), snap, led)
    assert d.reasons == {"a": "1 free GPU, needs 2"}  # memory is the kubelet's business


def test_a_gang_of_two_that_does_not_fit() -> None:
    snap, led = cluster(node("a", 2))
    led.assume("x/o", [P(0, "a", 1)])
    d = schedule(workload(replicas=2, gpusPerReplica=1), snap, led)
    assert d.message == ("gang of 2 x 1 GPU(s) does not fit, nothing booked: "
                         "a: 1 free GPU, room for 1 of 2 replicas")
    m = schedule(workload(replicas=2, schedulingStrategy="annotationMap",
                          schedulingMap="0=a:0\n1=a:1"), snap, led)
    assert m.message == ("gang of 2 not placed, nothing booked: "
                         "a: replica 1: device 1 held by x/o")


def test_minimum_memory_boundaries() -> None:
    snap, led = cluster(node("bare", 2), node("g", 2), gpunodes=(gpunode("g", 2, memory=4096),))
    assert schedule(workload(minGPUMemoryMiB=4096), snap, led).nodes == ["g"]  # exactly enough
    d = schedule(workload(minGPUMemoryMiB=1), snap, led, "bestFit")
    assert d.nodes == ["g"]  # unknown memory never satisfies a minimum, however small
    d = schedule(workload(minGPUMemoryMiB=4097), snap, led)
    assert d.reasons == {"bare": "0 free GPUs, needs 1 (2 with unknown memory, no GPUNode report)",
                         "g": "0 free GPUs, needs 1 (2 below 4097 MiB)"}


def test_a_cluster_explained_whole_up_to_the_limit_of_skipped_nodes() -> None:
    full = [node(f"f{i:02d}", 1) for i in range(EXPLAIN_ALL_BELOW)]
    snap, led = cluster(*full, node("z", 2, ready=False))
    for i in range(EXPLAIN_ALL_BELOW):
        led.assume(f"x/{i}", [P(0, f"f{i:02d}", 0)])
    d = schedule(workload(gpusPerReplica=2), snap, led)
    assert len(d.reasons) == EXPLAIN_ALL_BELOW + 1 and d.reasons["z"] == "NotReady"
    assert d.reasons["f00"] == "0 free GPUs, needs 2"
