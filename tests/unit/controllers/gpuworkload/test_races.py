"""The races of issue 21, each shown on the real placement state and reconciler with
the fakes of ``fakes.py`` (no server): a late delete of an old object, an own write
overtaken by a later one, a status write still in flight at a gang's commit, the
state lock held while the queue is called, an adoption that collides, a placement
handler that raises."""

from __future__ import annotations

import random
import threading
from typing import Any

from api.v1alpha1.types import DeviceExposure
from controllers.informers import placement_handler
from controllers.placement.events import CacheEvents
from controllers.placement.state import PlacementState
from runtime.informer import SharedIndexInformer
from runtime.store import thaw
from tests.unit.controllers.fakes import NS, Env
from tests.unit.controllers.placement.test_placement_state import NODES, child, placed
from tests.unit.controllers.podbinding.test_podbinding import Env as SeedEnv
from tests.unit.controllers.podbinding.test_podbinding import pod as seed_pod
from tests.unit.scheduling.helpers import DRA_DRIVER, dra_slice, gpunode, node
from tests.waiting import eventually


def running(env: Env, name: str) -> None:
    for pod in env.pods.list():
        if pod["metadata"]["name"].startswith(f"{name}-"):
            env.set_phase(pod["metadata"]["name"], "Running")
    env.settle(name)


# ------------------------------------------------- a late delete of an old object


def test_a_late_delete_of_an_old_object_keeps_the_new_objects_booking() -> None:
    env = Env()
    env.workload("w", gpusPerReplica=2, uid="uid-old")
    env.settle("w")
    running(env, "w")
    old = thaw(env.get("w"))
    # The old object goes and a new one of that name is placed before the
    # workload informer's handler is told of the deletion (the reconciler reads
    # the cache, which the informer updates before it calls its handlers).
    env.workloads.delete(f"{NS}/w")
    env.pod_gone("w-0")
    env.workload("w", gpusPerReplica=2, uid="uid-new")
    env.settle("w")
    booked = env.state.booking(f"{NS}/w")
    assert booked is not None and booked.uid == "uid-new"

    env.state.events.on_workload_deleted(old)  # the late delete of uid-old

    booked = env.state.booking(f"{NS}/w")
    assert booked is not None and booked.uid == "uid-new" and booked.committed


def test_the_delete_of_the_booked_object_itself_still_releases_it() -> None:
    env = Env()
    env.workload("w", gpusPerReplica=2, uid="uid-1")
    env.settle("w")
    obj = thaw(env.get("w"))
    env.workloads.delete(f"{NS}/w")
    env.state.events.on_workload_deleted(obj)
    assert env.state.booking(f"{NS}/w") is None


# ------------------------------------------- an adoption read back from a pod


def test_a_pod_read_back_onto_devices_another_workload_holds_ends_the_attempt() -> None:
    env = Env(gpus=2)
    env.workload("b", gpusPerReplica=2)
    env.settle("b")
    running(env, "b")
    # a's pod (its status write lost) names devices b's pods hold: the ledger
    # reports it and does not count it, and a's placement cannot be adopted
    a = env.workload("a", gpusPerReplica=2)
    ref = {"apiVersion": a["apiVersion"], "kind": "GPUWorkload", "name": "a",
           "uid": a["metadata"]["uid"], "controller": True}
    env.foreign_pod("a-0", "node1", devices="0,1", owner=ref)
    env.settle("a")
    cond = env.condition("a", "Scheduled")
    assert (cond["status"], cond["reason"]) == ("False", "PlacementConflict"), cond
    assert "a-0" in env.client.names("delete", "Pod")
    assert env.state.booking(f"{NS}/a") is None
    assert env.state.booking(f"{NS}/b") is not None


# ------------------------------------------------ the queue is called unlocked


def test_an_adopted_nomination_enqueues_its_victims_after_releasing_the_lock() -> None:
    """A preemptor's placement adopted from its status (``on_workload``) goes on
    with its preemption: the victims it finds still booked are enqueued, and the
    queue is called with the state lock free (another thread can take it)."""
    calls: list[tuple[list[str], bool]] = []

    def enqueue(keys: Any) -> None:
        got: list[bool] = []

        def other_thread() -> None:
            got.append(state._lock.acquire(timeout=0.5))
            if got[0]:
                state._lock.release()
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        calls.append((list(keys), got[0]))

    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(3),
                           enqueue_waiting=enqueue)
    state.rebuild(lambda: (NODES, [], [placed("low", [0, 1, 2, 3])],
                           [child("low", "uid-low", "node1", "0,1,2,3")]))
    high = placed("high", [0, 1, 2, 3], priority="high")
    high["status"].update(phase="Scheduled", nominatedOver=["uid-low#0"])
    state.events.on_workload(high)
    assert state.booking("ns/high") is not None
    assert calls == [(["ns/low"], True)]


# ------------------------------------------- a status write still in flight


class UnsettledWriter:
    """A status writer with a write of every workload still in flight: ``settle``
    says so (False) until ``settles`` is set."""

    def __init__(self) -> None:
        self.settles = False
        self.submitted: list[dict[str, Any]] = []

    def settle(self, key: str, timeout: float = 30.0) -> bool:
        return self.settles

    def submit(self, raw: Any, status: dict[str, Any], *, finalizer: bool = False) -> None:
        self.submitted.append(status)

    def has_finalizer(self, raw: Any) -> bool:
        return False

    def forget(self, key: str) -> None:
        pass


def test_a_gang_is_not_committed_while_a_status_write_of_it_may_still_land() -> None:
    env = Env()
    writer = UnsettledWriter()
    env.rec = env.new_reconciler(status_writer=writer)
    env.workload("g", replicas=2, gpusPerReplica=1)
    result = env.reconcile("g")
    assert result is not None and 0 < result.requeue_after <= 1.0
    assert env.decisions == 0 and env.state.booking(f"{NS}/g") is None
    assert env.client.of("patch") == [] and env.client.of("create") == []

    writer.settles = True
    env.reconcile("g")
    assert env.status("g")["placements"]  # committed now
    assert env.state.is_committed(f"{NS}/g")


def test_a_finalizer_stays_while_a_status_write_of_the_workload_may_still_land() -> None:
    env = Env()
    env.workload("w", gpusPerReplica=1)
    env.settle("w")
    assert env.get("w")["metadata"].get("finalizers")
    env.pod_gone("w-0")
    writer = UnsettledWriter()
    env.rec = env.new_reconciler(status_writer=writer)
    env.delete_workload("w")
    result = env.reconcile("w")
    assert result is not None and result.requeue_after > 0
    assert env.get("w") is not None  # the finalizer is kept for now

    writer.settles = True
    env.reconcile("w")
    assert env.get("w") is None


# ------------------------------------------------ a placement handler raises


def test_a_raising_placement_handler_leads_to_a_rebuild_that_holds_the_pod() -> None:
    env = Env()
    old = env.state

    def bug(pod: Any) -> list[str]:
        raise RuntimeError("a bug while reading the pod")
    old._ledger.sync_pod = bug  # type: ignore[method-assign]
    informer = SharedIndexInformer(client=None, api_version="v1", kind="Pod")  # type: ignore[arg-type]
    informer.add_event_handler(placement_handler(env.rec.states, "Pod", CacheEvents.on_pod,
                                                 CacheEvents.on_pod_deleted))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "other", "namespace": NS, "uid": "uid-other",
                        "annotations": {"gpu.orchestrator.dev/devices": "0,1,2,3"}},
           "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}]},
           "status": {"phase": "Running"}}
    env.pods.add(pod)
    informer.replace([pod], "5")
    eventually(lambda: not old.ready, timeout=5, what="the state invalidated")
    informer.stop()
    assert not old.ready  # the event was lost: this state is not trusted any more
    assert old.view().pod("uid-other") is None

    env.workload("w", gpusPerReplica=1)
    env.settle("w")
    # filled again in place from the caches (a new ledger, without the bug)
    assert env.rec.state is old and old.generation == 2
    assert old.view().pod("uid-other") is not None
    assert env.condition("w", "Scheduled")["reason"] == "Unschedulable"
    assert env.pod("w-0") is None


# ------------------------------------ a seed pod re-created under its name


def test_a_seed_pod_recreated_under_its_name_is_bound_again() -> None:
    """A StatefulSet makes ``check-0`` again as soon as the old one is gone; its
    reconcile may find the new, unbound pod where the old, bound one was. The old
    pod's booking (by name) is not the new pod's: the new one is bound."""
    env = SeedEnv()
    env.add(seed_pod("check-0"))
    env.reconcile("check-0")
    assert env.bound() == {"check-0": ("node1", "0,1")}
    env.client.bindings.clear()
    new = seed_pod("check-0")
    new["metadata"]["uid"] = "uid-check-0-again"
    env.pods.delete(f"{NS}/check-0")
    env.add(new)  # the delete and the add are one reconcile
    env.reconcile("check-0")
    assert env.bound() == {"check-0": ("node1", "0,1")}
    assert env.client.bindings[0]["metadata"]["uid"] == "uid-check-0-again"


def test_an_invalidated_state_wakes_the_workloads_waiting_for_room() -> None:
    """The lost event may have been the deletion that made room: the waiting
    workloads are reconciled (which rebuilds the state first)."""
    env = Env(gpus=1)
    env.foreign_pod("big", "node1", devices="0")
    env.workload("w", gpusPerReplica=1)
    env.settle("w")
    assert env.condition("w", "Scheduled")["reason"] == "Unschedulable"
    env.woken.clear()
    env.state.invalidate("a handler raised")
    assert f"{NS}/w" in env.woken


def test_a_late_delete_of_an_old_gpunode_keeps_the_new_ones_devices() -> None:
    """The rebuild reads the caches, which may already hold a GPUNode created again
    under its name, before the old one's delete reaches the handler."""
    new = gpunode("node1")
    new["metadata"]["uid"] = "gn-new"
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: (NODES, [new], [], []))
    assert state.uuids("node1", [0]) == ["GPU-node1-0"]
    old = gpunode("node1")
    old["metadata"]["uid"] = "gn-old"
    state.events.on_gpunode_deleted(old)
    assert state.uuids("node1", [0]) == ["GPU-node1-0"]
    state.events.on_gpunode_deleted(new)
    assert state.uuids("node1", [0]) is None


def test_a_late_delete_of_an_old_resourceslice_keeps_the_new_ones_devices() -> None:
    new = dra_slice("node1", 2, name="node1-slice")
    new["metadata"]["uid"] = "rs-new"
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, dra_driver=DRA_DRIVER)
    state.rebuild(lambda: (NODES, [], [], []), lambda: ([new], []))
    assert state.uuids("node1", [0, 1]) == ["GPU-node1-0", "GPU-node1-1"]
    old = dra_slice("node1", 2, name="node1-slice")
    old["metadata"]["uid"] = "rs-old"
    state.events.on_resourceslice_deleted(old)
    assert state.uuids("node1", [0, 1]) == ["GPU-node1-0", "GPU-node1-1"]
    state.events.on_resourceslice_deleted(new)
    assert state.uuids("node1", [0, 1]) is None


def test_a_late_delete_of_an_old_node_keeps_the_new_one() -> None:
    new = node("node1", 4)
    new["metadata"]["uid"] = "node-new"
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES)
    state.rebuild(lambda: ([new], [], [], []))
    old = node("node1", 4)
    old["metadata"]["uid"] = "node-old"
    state.events.on_node_deleted(old)
    assert state.has_node("node1")
    state.events.on_node_deleted(new)
    assert not state.has_node("node1")
