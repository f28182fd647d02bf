"""The placement cache's event side (``events.CacheEvents``): a Node, GPUNode or
claim that comes, changes or goes changes what is offered and whom it wakes; a
heartbeat or a cordon wakes nobody; a late delete of an older object of the same
name removes nothing; a refused node is said once. Pure: the state is fed plain
dicts (informer tombstones as objects with ``obj``)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest
import structlog

from api.v1alpha1.types import DeviceExposure
from controllers.placement.state import PlacementState
from internal.metrics.domain import BAD_OBJECTS, DEVICE_CONFLICTS
from internal.scheduling.bounds import REFUSED_REASON
from tests.unit.controllers.placement.test_cache_adopt import Book, tried
from tests.unit.controllers.placement.test_placement_state import World, gw, our_job, pod
from tests.unit.controllers.placement.test_placement_state_dra import state as dra_state
from tests.unit.scheduling.helpers import dra_claim, dra_slice, gpunode, node


@dataclass
class Tombstone:
    """An informer's last known state of a deleted object."""

    obj: Any
    key: str = ""


class Cluster:
    def __init__(self, max_gpus_per_node: int = 16, books: tuple[Any, ...] = ()) -> None:
        self.woken: list[str] = []
        self.on_node: list[str] = []
        self.problems: list[tuple[str, str, str]] = []
        self.state = PlacementState(
            DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(3),
            enqueue_waiting=self.woken.extend, enqueue_on_node=self.on_node.append,
            max_gpus_per_node=max_gpus_per_node, pod_books=books,
            on_problem=lambda o, r, m: self.problems.append((o["metadata"]["name"], r, m)))

    def fill(self, nodes: list[dict[str, Any]], gpunodes: list[dict[str, Any]] = ()
             ) -> Cluster:  # type: ignore[assignment]
        self.state.rebuild(lambda: (nodes, list(gpunodes), [], []))
        self.state.set_workload(tried("waits", gpusPerReplica=1))
        self.woken.clear()
        return self


def live(g: dict[str, Any]) -> dict[str, Any]:
    """A GPUNode whose agent's heartbeat is fresh (one in the future is)."""
    g["status"]["lastHeartbeatTime"] = "2999-01-01T00:00:00Z"
    return g


def with_uid(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    obj["metadata"]["uid"] = uid
    return obj


# ------------------------------------------------------------- nodes


def test_a_deleted_node_is_no_longer_offered_and_its_workloads_are_told() -> None:
    c = Cluster().fill([with_uid(node("node1"), "n1-new")])
    c.state.events.on_node_deleted(with_uid(node("node1"), "n1-old"))  # a late delete
    assert c.state.has_node("node1") and c.on_node == []
    c.state.events.on_node_deleted(Tombstone(with_uid(node("node1"), "n1-new")))
    assert not c.state.has_node("node1")
    assert c.on_node == ["node1"]


def test_a_node_event_before_the_first_fill_changes_nothing() -> None:
    c = Cluster()
    c.state.events.on_node(node("node1"))
    c.state.events.on_node_deleted(node("node1"))
    assert not c.state.has_node("node1") and c.on_node == [] and c.woken == []


ROOMIER: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("a new node", node("other"), node("node2")),
    ("ready again", node("node1", ready=False), node("node1")),
    ("uncordoned", node("node1", unschedulable=True), node("node1")),
    ("more GPUs", node("node1", 2), node("node1", 4)),
    ("relabelled", node("node1"), node("node1", labels={"zone": "b"})),
    ("untainted", node("node1", taints=[{"key": "k", "effect": "NoSchedule"}]),
     node("node1")),
]


@pytest.mark.parametrize(("why", "before", "after"), ROOMIER, ids=[r[0] for r in ROOMIER])
def test_a_node_that_could_fit_more_wakes_the_waiting(
        why: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    c = Cluster().fill([before])
    c.state.events.on_node(after)
    assert c.woken == ["ns/waits"], why


NO_ROOM: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("a heartbeat", node("node1"), node("node1")),
    ("cordoned", node("node1"), node("node1", unschedulable=True)),
    ("not ready", node("node1"), node("node1", ready=False)),
    ("not ready, relabelled", node("node1"), node("node1", ready=False, labels={"z": "b"})),
]


@pytest.mark.parametrize(("why", "before", "after"), NO_ROOM, ids=[r[0] for r in NO_ROOM])
def test_a_node_change_that_fits_no_more_wakes_nobody(
        why: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    c = Cluster().fill([before])
    c.state.events.on_node(after)
    assert c.woken == [], why


def test_a_gpunode_that_reports_more_healthy_devices_wakes_the_waiting() -> None:
    c = Cluster().fill([node("node1")], [live(gpunode("node1", unhealthy=(2, 3)))])
    c.state.events.on_gpunode(live(gpunode("node1", unhealthy=(2, 3))))  # the same report
    assert c.woken == []
    c.state.events.on_gpunode(live(gpunode("node1")))
    assert c.woken == ["ns/waits"]


def test_a_gpunode_reporting_bigger_devices_wakes_the_waiting() -> None:
    c = Cluster().fill([node("node1")], [live(gpunode("node1", memory=40960))])
    c.state.events.on_gpunode(live(gpunode("node1", memory=81920)))
    assert c.woken == ["ns/waits"]


def test_a_deleted_gpunode_takes_its_uuids_unless_it_was_an_older_one() -> None:
    c = Cluster().fill([node("node1")], [with_uid(gpunode("node1"), "g-new")])
    assert c.state.uuids("node1", [0]) == ["GPU-node1-0"]
    c.state.events.on_gpunode_deleted(with_uid(gpunode("node1"), "g-old"))
    assert c.state.uuids("node1", [0]) == ["GPU-node1-0"]
    c.state.events.on_gpunode_deleted(Tombstone(with_uid(gpunode("node1"), "g-new")))
    assert c.state.uuids("node1", [0]) is None
    assert c.state.has_node("node1")  # the Node stays, counted by its allocatable


def test_a_node_reporting_too_many_gpus_is_refused_and_said_once() -> None:
    c = Cluster(max_gpus_per_node=8).fill([node("node1")])
    c.state.events.on_node(node("big", 16))
    c.state.events.on_node(node("big", 16))  # its heartbeat: not said again
    assert [(n, r) for n, r, _ in c.problems] == [("big", REFUSED_REASON)]
    assert "big " in c.problems[0][2] and "at most 8" in c.problems[0][2]
    assert not c.state.decide(gw("wide", gpusPerReplica=8)).ok  # big offers none


# ------------------------------------------------------------- claims


def test_a_deleted_claim_gives_its_device_back_and_wakes_the_waiting() -> None:
    woken: list[str] = []
    s = dra_state(woken)
    s.events.on_claim(dra_claim("k1", "node1", "gpu-0"))
    s.events.on_claim(dra_claim("k2", "node1", "gpu-1"))
    assert s.view().free_count("node1") == 0
    s.set_workload(tried("waits", gpusPerReplica=1))
    woken.clear()
    s.events.on_claim_deleted(dra_claim("k-never-seen", "node1", "gpu-0"))
    assert woken == []
    s.events.on_claim_deleted(Tombstone(dra_claim("k1", "node1", "gpu-0")))
    assert woken == ["ns/waits"]
    assert s.view().free_count("node1") == 1
    s.events.on_claim_deleted(dra_claim("k2", "node1", "gpu-1"))
    assert s.view().free_count("node1") == 2


def test_a_slice_publishing_more_devices_wakes_the_waiting_and_its_delete_takes_them(
) -> None:
    woken: list[str] = []
    s = dra_state(woken)
    s.set_workload(tried("waits", gpusPerReplica=1))
    woken.clear()
    s.events.on_resourceslice(dra_slice("node1", 4))
    assert woken == ["ns/waits"] and s.node_devices("node1") == {0, 1, 2, 3}
    s.events.on_resourceslice_deleted(Tombstone(dra_slice("node1", 4)))
    info = s.node_info("node1")
    assert info is not None and not info.dra_driver  # its Node's allocatable counts


# ------------------------------------------------------------- workloads


def test_a_late_delete_of_an_older_workload_releases_nothing() -> None:
    c = Cluster().fill([node("node1")])
    assert c.state.decide(gw("a", uid="uid-new", gpusPerReplica=4)).ok
    c.state.events.on_workload_deleted(
        {"metadata": {"name": "a", "namespace": "ns", "uid": "uid-old"}})
    assert c.state.booking("ns/a") is not None and c.woken == []


def test_a_workload_deleted_from_a_tombstone_releases_its_booking() -> None:
    c = Cluster().fill([node("node1")])
    raw = {"metadata": {"name": "a", "namespace": "ns", "uid": "uid-a"}}
    assert c.state.decide(gw("a", gpusPerReplica=4)).ok
    c.state.events.on_workload_deleted(Tombstone(raw))
    assert c.state.booking("ns/a") is None
    assert c.woken == ["ns/waits"]


def test_a_workload_deleted_with_only_its_key_known_releases_its_booking() -> None:
    c = Cluster().fill([node("node1")])
    assert c.state.decide(gw("a", gpusPerReplica=4)).ok
    c.state.events.on_workload_deleted(Tombstone(None, key="ns/a"))
    assert c.state.booking("ns/a") is None
    assert c.woken == ["ns/waits"]


# ------------------------------------------------------------- what is held less


def test_a_pod_holding_fewer_gpus_wakes_the_waiting_the_same_pod_again_nobody() -> None:
    c = Cluster().fill([node("node1")])
    c.state.events.on_pod(pod("named", "node1", devices="0,1"))
    c.state.events.on_pod(pod("counted", "node1", gpus=2))
    assert c.woken == []
    c.state.events.on_pod(pod("named", "node1", devices="0,1"))  # a resync
    c.state.events.on_pod(pod("counted", "node1", gpus=2))
    assert c.woken == []
    c.state.events.on_pod(pod("counted", "node1", gpus=1))
    assert c.woken == ["ns/waits"]


def test_a_claim_delivered_again_wakes_nobody_one_holding_less_wakes_the_waiting() -> None:
    woken: list[str] = []
    s = dra_state(woken)
    s.events.on_claim(dra_claim("k1", "node1", "gpu-0", "gpu-1"))
    s.set_workload(tried("waits", gpusPerReplica=1))
    woken.clear()
    s.events.on_claim(dra_claim("k1", "node1", "gpu-0", "gpu-1"))  # a resync
    assert woken == []
    s.events.on_claim(dra_claim("k1", "node1", "gpu-1"))
    assert woken == ["ns/waits"] and s.view().free_count("node1") == 1


# ------------------------------------------------------------- node fit


class OwningBook(Book):
    """A pod book that owns the pods named ``seeded-*``."""

    def owns(self, pod: dict[str, Any]) -> bool:
        return str(pod["metadata"]["name"]).startswith("seeded-")


def cpu_pod(name: str) -> dict[str, Any]:
    p = pod(name, "node1")
    p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4"}}
    return p


@pytest.mark.parametrize("name", ["plain", "seeded-0"])
def test_a_pods_requests_count_on_its_node_until_it_is_gone(name: str) -> None:
    """Any pod's CPU counts (a pod book's too, whose GPUs its book holds)."""
    n = node("node1")
    n["status"]["allocatable"]["cpu"] = "4"
    c = Cluster(books=(OwningBook(devices=()),)).fill([n])
    w = gw("w", gpusPerReplica=1, template={"spec": {"containers": [
        {"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}})
    c.state.events.on_pod(cpu_pod(name))
    assert not c.state.decide(w).ok
    c.state.events.on_pod_deleted(Tombstone(cpu_pod(name)))
    assert c.state.decide(w).ok


# ------------------------------------------------------------- what is reported


def test_unreadable_and_clashing_pods_are_counted_and_said() -> None:
    c = Cluster().fill([node("node1")])
    bad, conflicts = BAD_OBJECTS.labels("Pod")._value.get(), \
        DEVICE_CONFLICTS.labels("reported")._value.get()
    with structlog.testing.capture_logs() as logs:
        c.state.events.on_pod(pod("bad", "node1", devices="x"))
        c.state.events.on_pod(pod("first", "node1", devices="1"))
        c.state.events.on_pod(pod("second", "node1", devices="1"))
    assert [(n, r) for n, r, _ in c.problems] == [("bad", "BadAnnotation"),
                                                  ("second", "DeviceConflict")]
    assert BAD_OBJECTS.labels("Pod")._value.get() == bad + 1
    assert DEVICE_CONFLICTS.labels("reported")._value.get() == conflicts + 1
    said = [e for e in logs if e["event"] == "ledger.pod.problem"]
    assert [e["problem"] for e in said] == [m for _, _, m in c.problems]
    assert all(e["log_level"] == "warning" for e in said)


def test_each_unreadable_pod_is_said_once_and_again_once_it_was_fixed_or_gone() -> None:
    c = Cluster().fill([node("node1")])
    c.state.events.on_pod(pod("a", "node1", devices="x"))
    c.state.events.on_pod(pod("b", "node1", devices="y"))
    c.state.events.on_pod(pod("a", "node1", devices="x"))  # a resync: said already
    c.state.events.on_pod(pod("a", "node1", devices="x"))  # and another
    assert [n for n, _, _ in c.problems] == ["a", "b"]
    c.state.events.on_pod(pod("a", "node1", devices="0"))  # fixed
    c.state.events.on_pod(pod("a", "node1", devices="x"))
    c.state.events.on_pod_deleted(Tombstone(pod("b", "node1", devices="y")))
    c.state.events.on_pod(pod("b", "node1", devices="y"))
    assert [n for n, _, _ in c.problems] == ["a", "b", "a", "b"]


def test_a_deleted_job_from_a_tombstone_gives_its_devices_back() -> None:
    job = our_job()
    c = Cluster().fill([node("node1")])
    c.state.events.on_job(job)
    assert c.state.view().free_count("node1") == 2
    c.state.events.on_job_deleted(Tombstone(job))
    assert c.state.view().free_count("node1") == 4 and c.woken == ["ns/waits"]


def test_a_claim_on_a_held_device_is_said_with_the_claim() -> None:
    seen: list[tuple[str, str, str]] = []
    s = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, dra_driver="gpu.nvidia.com",
                       on_problem=lambda o, r, m: seen.append((o["metadata"]["name"], r, m)))
    s.rebuild(lambda: ([node("node1", 4)], [], [], []), lambda: ([dra_slice("node1", 2)], []))
    s.events.on_claim(dra_claim("k1", "node1", "gpu-0"))
    with structlog.testing.capture_logs() as logs:
        s.events.on_claim(dra_claim("k2", "node1", "gpu-0"))
    [(name, reason, message)] = seen
    assert (name, reason) == ("c-k2", "DeviceConflict")
    assert [(e["event"], e["problem"]) for e in logs] == [("ledger.claim.problem", message)]


def test_a_refused_node_is_counted_and_logged_once() -> None:
    c = Cluster(max_gpus_per_node=8).fill([node("node1")])
    before = BAD_OBJECTS.labels("Node")._value.get()
    with structlog.testing.capture_logs() as logs:
        c.state.events.on_node(node("big", 16))
        c.state.events.on_node(node("big", 16))
    assert BAD_OBJECTS.labels("Node")._value.get() == before + 1
    [(_, _, message)] = c.problems
    assert [(e["event"], e["node"], e["message"]) for e in logs
            if e["event"] == "node.refused"] == [("node.refused", "big", message)]


def test_a_state_told_of_no_node_queue_takes_a_node_delete() -> None:
    w = World()
    w.state.events.on_node_deleted(node("node1"))
    assert not w.state.has_node("node1")
