"""annotationMap through ``schedule``: the messages a user reads when the map is
missing or wrong, every failing replica named, devices named by the map checked one
by one, and GPUs held without names (other GPU pods) respected even when the map
names devices."""

from __future__ import annotations

from api.v1alpha1.types import Placement
from internal.scheduling import UNSCHEDULABLE, Ledger, schedule
from internal.scheduling.framework import INVALID_MAP, SCHEDULED
from tests.unit.scheduling.helpers import cluster, four_nodes, gpunode, node, workload


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def other_gpu_pod(led: Ledger, node: str, gpus: int) -> None:
    """GPUs of ``node`` held without naming devices (a GPU pod the kubelet placed)."""
    led.assume("ns/pod", [Placement(index=0, node=node, devices=[])], gpus_per_replica=gpus)


def mapped(text: str | None, replicas: int = 1, name: str = "m", **spec: object):
    if text is not None:
        spec["schedulingMap"] = text
    return workload(name, replicas=replicas, schedulingStrategy="annotationMap", **spec)


def test_no_map_at_all() -> None:
    snap, led = four_nodes()
    d = schedule(mapped(None), snap, led)
    assert d.outcome == INVALID_MAP and not d.ok and d.placements == []
    assert d.message == ("schedulingStrategy annotationMap needs spec.schedulingMap or the "
                         "gpu-scheduling-map annotation")


def test_map_that_does_not_parse() -> None:
    snap, led = four_nodes()
    d = schedule(mapped("0=node1:0\n1=node2", 2), snap, led)
    assert d.outcome == INVALID_MAP
    assert d.message == ("invalid scheduling map: line 2 '1=node2': expected "
                         "'<node>:<dev>,<dev>' after '='")


def test_map_that_does_not_fit_the_workload_lists_every_problem() -> None:
    snap, led = four_nodes()
    d = schedule(mapped("0=node1:0\n2=node9:1\n3=node2:4,5", 3), snap, led)
    assert d.outcome == INVALID_MAP
    assert d.message == (
        "invalid scheduling map: line 3: replica index 3 >= replicas (3); "
        "no map entry for replica(s) 1; line 2: node 'node9' does not exist; "
        "line 3: device 4, 5 beyond node node2's 4 GPU(s)"
    )


def test_placed_map_says_where() -> None:
    snap, led = four_nodes()
    d = schedule(mapped("0=node2:1\n1=node1:0,3", 2), snap, led)
    assert d.outcome == SCHEDULED and d.ok
    assert d.placements == [P(0, "node2", 1), P(1, "node1", 0, 3)]
    assert d.message == "placed 2 replica(s) on node1, node2"
    assert d.gpus_total == 3


def test_every_failing_replica_is_named_per_node() -> None:
    snap, led = cluster(node("a", 4), node("b", 4),
                        gpunodes=(gpunode("a", unhealthy=(1,)), gpunode("b", memory=1000)))
    led.assume("x/other", [P(0, "a", 2)])
    w = mapped("0=a:0\n1=a:1,2\n2=b:0\n3=a:1", 4, minGPUMemoryMiB=2000)
    d = schedule(w, snap, led)
    assert d.outcome == UNSCHEDULABLE and d.placements == []
    assert d.reasons == {
        "a": "replica 1: device 1 unhealthy; device 2 held by x/other, "
             "replica 3: device 1 unhealthy",
        "b": "replica 2: device 0 below 2000 MiB",
    }
    assert d.message == (
        "gang of 4 not placed, nothing booked: a: replica 1: device 1 unhealthy; device 2 "
        "held by x/other, replica 3: device 1 unhealthy; b: replica 2: device 0 below 2000 MiB"
    )


def test_a_single_replica_map_failure_is_not_called_a_gang() -> None:
    snap, led = cluster(node("a", 2), node("b", 2, ready=False))
    d = schedule(mapped("0=b:0"), snap, led)
    assert d.message == "b: replica 0: NotReady"


def test_a_device_missing_from_the_agents_report_does_not_exist() -> None:
    g = {"metadata": {"name": "n"}, "status": {"devices": [{"index": 0}, {"index": 2},
                                                           {"index": 3}]}}
    snap, led = cluster(node("n", 4), gpunodes=(g,))
    d = schedule(mapped("0=n:1"), snap, led)
    assert d.reasons == {"n": "replica 0: device 1 does not exist (3 GPUs)"}
    assert schedule(mapped("0=n:0,2"), snap, led).placements == [P(0, "n", 0, 2)]


def test_named_devices_never_go_where_the_device_plugin_counts() -> None:
    """One authority per node: GPUs the device plugin handed out have no index, so
    any device a map names could be one of them."""
    snap, led = cluster(node("n", 4))
    other_gpu_pod(led, "n", 1)
    d = schedule(mapped("0=n:0"), snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons == {"n": "replica 0: GPUs held by the device plugin (ns/pod); named "
                              "devices could be the same ones"}
    led.forget("ns/pod")
    assert schedule(mapped("0=n:2"), snap, led).placements == [P(0, "n", 2)]


def test_replicas_sharing_a_device_need_it_once() -> None:
    snap, led = cluster(node("n", 4))
    d = schedule(mapped("0=n:3\n1=n:3\n2=n:0", 3), snap, led)
    assert d.ok and d.placements == [P(0, "n", 3), P(1, "n", 3), P(2, "n", 0)]


def test_a_map_may_rename_its_own_devices() -> None:
    """Rescheduling a mapped workload: the devices it already holds are its own."""
    snap, led = cluster(node("n", 2))
    w = mapped("0=n:0")
    schedule(w, snap, led).assume(led, w)
    again = mapped("0=n:0\n1=n:1", 2)
    d = schedule(again, snap, led)
    assert d.ok and d.placements == [P(0, "n", 0), P(1, "n", 1)]
