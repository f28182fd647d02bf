"""The placement state and the ledger's rebuild fed plain dicts (no server): one
malformed pod is reported and skipped while the rest is placed; pods hold until
they are gone; a preemptor's nomination keeps its victims' devices from everyone
else and is given back when it goes."""

from __future__ import annotations

import random
from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.placement.state import PlacementState
from controllers.podbinding.seedbook import SeedBook
from internal.scheduling.framework import PREEMPT
from internal.scheduling.ledger import Ledger
from tests.unit.scheduling.helpers import node

NODES = [node("node1", 4), node("node2", 4)]


def pod(name: str, node_name: str, *, devices: str | None = None, gpus: int = 0,
        phase: str = "Running", scheduler: str | None = None,
        owner: dict[str, Any] | None = None, labels: dict[str, str] | None = None,
        terminating: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "x"}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                            "annotations": {}, "labels": labels or {}}
    if devices is not None:
        meta["annotations"]["gpu.orchestrator.dev/devices"] = devices
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    spec: dict[str, Any] = {"nodeName": node_name, "containers": [c]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def child(workload: str, uid: str, node_name: str, devices: str, attempt: int = 0,
          **kw: Any) -> dict[str, Any]:
    """A pod of GPUWorkload ``workload`` (its controller), attempt ``attempt``."""
    ref = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
           "name": workload, "uid": uid, "controller": True}
    return pod(f"{workload}-0", node_name, devices=devices, owner=ref,
               labels={"gpu.orchestrator.dev/attempt": str(attempt)}, **kw)


def gw(name: str, uid: str | None = None, **spec: Any) -> GPUWorkload:
    return GPUWorkload.model_validate({"metadata": {"name": name, "namespace": "ns",
                                                    "uid": uid or f"uid-{name}"},
                                       "spec": spec})


class World:
    def __init__(self, pods: list[dict[str, Any]] = (), workloads: list[dict] = (),  # type: ignore[assignment]
                 books: tuple[Any, ...] = ()) -> None:
        self.problems: list[tuple[str, str, str]] = []
        self.woken: list[str] = []
        self.state = PlacementState(
            DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(3),
            enqueue_waiting=self.woken.extend, pod_books=books,
            on_problem=lambda o, r, m: self.problems.append((o["metadata"]["name"], r, m)))
        self.rebuilt = self.state.rebuild(lambda: (NODES, [], list(workloads), list(pods)))

    def owners(self, node_name: str = "node1") -> dict[int, frozenset[str]]:
        led = self.state.view()
        return {d: led.device_owners(node_name, d) for d in range(4)
                if led.device_owners(node_name, d)}


# ------------------------------------------------------------- malformed pods


def test_a_malformed_devices_annotation_is_reported_once_and_the_rest_is_placed() -> None:
    w = World()
    w.state.events.on_pod(pod("good", "node1", devices="0,1"))
    bad = pod("bad", "node1", devices="²", scheduler="gpu-scheduler")
    w.state.events.on_pod(bad)  # must not raise
    w.state.events.on_pod(bad)  # a resync of the same pod
    assert len(w.problems) == 1
    name, reason, message = w.problems[0]
    assert (name, reason) == ("bad", "BadAnnotation")
    assert "pod ns/bad" in message and "'²'" in message
    # everyone else is placed: a 2-GPU workload gets node1's two free devices or node2
    d = w.state.decide(gw("next", gpusPerReplica=2, nodeSelector={}))
    assert d.ok, d.message
    assert not ({0, 1} & set(d.placements[0].devices)) or d.placements[0].node == "node2"
    # once the annotation is fixed the pod holds what it names, and a later
    # malformed write is reported again
    w.state.events.on_pod(pod("bad", "node1", devices="3"))
    assert w.owners()[3] == {"pod:uid-bad"}
    w.state.events.on_pod(bad)
    assert len(w.problems) == 2


def test_a_malformed_pod_still_counts_the_gpus_it_requests() -> None:
    w = World()
    w.state.events.on_pod(pod("bad", "node1", devices="²", gpus=3))
    assert [r for _, r, _ in w.problems] == ["BadAnnotation"]
    # the device plugin gave it three GPUs whatever the annotation says
    assert w.state.view().free_count("node1") == 1


def test_the_rebuild_reports_a_malformed_pod_and_books_everything_else() -> None:
    placed = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
              "metadata": {"name": "w", "namespace": "ns", "uid": "uid-w",
                           "creationTimestamp": "2026-01-01T00:00:00Z"},
              "spec": {"gpusPerReplica": 2},
              "status": {"phase": "Running",
                         "placements": [{"index": 0, "node": "node2", "devices": [0, 1]}]}}
    pods = [pod("bad", "node1", devices="²"), pod("good", "node1", devices="0"),
            child("w", "uid-w", "node2", "0,1")]
    ledger, problems = Ledger.rebuild([placed], pods,
                                      node_devices={"node1": range(4), "node2": range(4)})
    assert any("pod ns/bad" in p and "'²'" in p for p in problems)
    assert ledger.device_owners("node1", 0) == {"pod:uid-good"}
    assert ledger.device_owners("node2", 0) == {"uid-w#0"}
    assert ledger.allocation("ns/w") is not None  # the committed placement is booked


def test_a_restart_with_a_malformed_seed_pod_places_workloads_and_seed_pods() -> None:
    """The issue's attack: a bound pod of the seed path's scheduler with ``"²"``
    must not stop the rebuild (and so every placement) after a restart."""
    bad = pod("evil", "node1", devices="²", scheduler="gpu-scheduler", gpus=1)
    seed = pod("check-0", "node2", devices="0,1", scheduler="gpu-scheduler")
    book = SeedBook()
    w = World(pods=[bad, seed], books=(book,))
    assert w.state.ready
    # the malformed one is read as its request, counted; the other by its devices
    assert w.state.view().free_count("node1") == 3
    assert w.owners("node2").keys() == {0, 1}
    # node1 counts (the device plugin's), node2 names: a counted placement goes to node1
    d = w.state.decide(gw("after-restart", gpusPerReplica=3, deviceExposure="device-plugin"))
    assert d.ok and d.placements[0].node == "node1", d.message


# ------------------------------------------------------------- pods hold


def test_a_terminating_pod_holds_until_it_is_gone_and_then_wakes_the_waiting() -> None:
    uid = "uid-a"
    w = World(pods=[child("a", uid, "node1", "0,1,2,3"), child("b", "uid-b", "node2",
                                                              "0,1,2,3")])
    d = w.state.decide(gw("waiter", gpusPerReplica=4))
    assert not d.ok
    w.state.pending.waiting.add("ns/waiter")
    w.state.events.on_pod(child("a", uid, "node1", "0,1,2,3", terminating=True))
    assert w.owners() == {d: {f"{uid}#0"} for d in range(4)}
    assert "ns/waiter" not in w.woken
    w.state.events.on_pod_deleted(child("a", uid, "node1", "0,1,2,3", terminating=True))
    assert w.owners() == {} and "ns/waiter" in w.woken
    assert w.state.decide(gw("waiter", gpusPerReplica=4)).ok


def test_a_finished_pod_frees_its_devices_though_its_object_remains() -> None:
    w = World(pods=[child("a", "uid-a", "node1", "0,1")])
    w.state.pending.waiting.add("ns/waiter")
    w.state.events.on_pod(child("a", "uid-a", "node1", "0,1", phase="Succeeded"))
    assert w.owners() == {} and "ns/waiter" in w.woken


def test_a_booking_of_a_deleted_object_is_not_claimed_by_a_new_one_of_that_name() -> None:
    w = World(pods=[child("w", "uid-old", "node1", "0,1")])
    old = gw("w", uid="uid-old", gpusPerReplica=2)
    assert w.state.decide(old).ok  # the old object's booking (node2 or node1's 2,3)
    assert w.state.standing_of("ns/w", "uid-new").booking is None
    assert w.state.booking("ns/w") is None
    # its pod still holds: a different holder from the new object
    assert w.owners()[0] == {"uid-old#0"}
    new = w.state.decide(gw("w", uid="uid-new", gpusPerReplica=4))
    assert new.ok and new.placements[0].node == "node2"
    assert w.state.booking("ns/w").owner == "uid-new#0"


# ------------------------------------------------------------- preemption


def placed(name: str, devices: list[int], priority: str = "low") -> dict[str, Any]:
    """A running GPUWorkload of ``len(devices)`` GPUs on node1, as the cache has it."""
    return {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"gpusPerReplica": len(devices), "priority": priority},
            "status": {"phase": "Running",
                       "placements": [{"index": 0, "node": "node1", "devices": devices}]}}


def test_a_nomination_keeps_the_victims_devices_from_everyone_else() -> None:
    low_pod = child("low", "uid-low", "node1", "0,1,2,3")
    low = placed("low", [0, 1, 2, 3])
    busy = child("busy", "uid-busy", "node2", "0,1,2,3")
    w = World(pods=[low_pod, busy], workloads=[low])
    high = gw("high", gpusPerReplica=4, priority="high", schedulingStrategy="priority")
    d = w.state.decide(high)
    assert d.outcome == PREEMPT and d.victims == ["ns/low"]
    assert "ns/low" in w.woken
    assert w.state.eviction("ns/low") is not None  # told on its own reconcile
    assert w.state.booking("ns/low") is None  # released: held on to until low departs
    assert w.state.blockers("ns/high") == {"node1": ["departing:ns/low", "ns/low-0"]}
    assert w.owners() == {d: {"uid-low#0", "uid-high#0"} for d in range(4)}

    # nobody else gets them, not even a workload as important as the preemptor
    other = w.state.decide(gw("other", gpusPerReplica=1, priority="high"))
    assert not other.ok and other.outcome != PREEMPT

    w.state.events.on_pod(child("low", "uid-low", "node1", "0,1,2,3", terminating=True))
    assert w.state.blockers("ns/high") == {"node1": ["departing:ns/low", "ns/low-0"]}
    w.state.events.on_pod_deleted(low_pod)
    # until low's own reconcile sees no child of its own left (one of its reconciles
    # may have been creating a pod when high chose it)
    assert w.state.blockers("ns/high") == {"node1": ["departing:ns/low"]}
    w.woken.clear()
    w.state.departed("ns/low")
    assert "ns/high" in w.woken  # the preemptor may create its pod now
    assert w.state.blockers("ns/high") == {}
    assert w.owners() == {d: {"uid-high#0"} for d in range(4)}


def test_a_preemptor_that_goes_gives_its_nomination_back() -> None:
    low_pod = child("low", "uid-low", "node1", "0,1")
    w = World(pods=[low_pod, child("busy", "uid-busy", "node2", "0,1,2,3"),
                    pod("fill", "node1", devices="2,3")], workloads=[placed("low", [0, 1])])
    d = w.state.decide(gw("high", gpusPerReplica=2, priority="high",
                          schedulingStrategy="priority"))
    assert d.outcome == PREEMPT
    w.state.events.on_workload_deleted({"metadata": {"name": "high", "namespace": "ns"}})
    assert w.state.booking("ns/high") is None
    assert w.owners()[0] == {"uid-low#0"}  # the victim's pod still holds
    w.state.events.on_pod_deleted(low_pod)
    w.state.departed("ns/low")  # its reconcile sees it gone
    assert w.owners().keys() == {2, 3}
    assert w.state.decide(gw("mid", gpusPerReplica=2, priority="medium")).ok


def test_a_restored_nomination_over_seed_pods_is_booked_after_their_book() -> None:
    """After a restart, a preemptor nominated over a seed-path pod (its booking stays
    until the pod is gone) is booked after the seed book has booked that pod: the
    pod keeps its booking, and the preemptor waits for it."""
    seed = pod("check-0", "node1", devices="0,1,2,3", scheduler="gpu-scheduler",
               terminating=True)
    high = placed("high", [0, 1, 2, 3], priority="high")
    high["status"].update(phase="Scheduled", nominatedOver=["Pod:ns/check-0"])
    w = World(pods=[seed], workloads=[high], books=(SeedBook(),))
    assert w.rebuilt == []
    assert w.state.booking("ns/check-0") is None  # booked under its owner key
    assert w.state.booking("Pod:ns/check-0") is not None
    assert w.state.blockers("ns/high") == {"node1": ["Pod:ns/check-0"]}
    assert w.state.eviction("Pod:ns/check-0") is None  # its pod was asked already


OUR_JOB_OWNER = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
                 "name": "w", "uid": "uid-w", "controller": True}


def our_job() -> dict[str, Any]:
    """Job ``w-0`` of GPUWorkload ``w`` (attempt 1) on node1's devices 1 and 2."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "w-0", "namespace": "ns", "uid": "uid-job",
                         "labels": {"gpu.orchestrator.dev/attempt": "1"},
                         "ownerReferences": [dict(OUR_JOB_OWNER)]},
            "spec": {"template": {"metadata": {"annotations": {
                "gpu.orchestrator.dev/devices": "1,2"}},
                "spec": {"nodeName": "node1", "containers": [{"name": "c"}]}}}}


def test_a_jobs_holding_lasts_until_it_is_gone_or_finished() -> None:
    ref, job = OUR_JOB_OWNER, our_job()
    w = World()
    w.state.events.on_job(job)
    assert w.owners() == {1: {"uid-w#1"}, 2: {"uid-w#1"}}
    foreign = {**job, "metadata": {**job["metadata"], "uid": "uid-other",
                                   "ownerReferences": [{**ref, "kind": "CronJob"}]}}
    w.state.events.on_job(foreign)  # not ours: its pods hold for it
    assert w.owners() == {1: {"uid-w#1"}, 2: {"uid-w#1"}}
    w.woken.clear()
    w.state.pending.waiting.add("ns/waiter")
    w.state.events.on_job({**job, "status": {"conditions": [{"type": "Failed", "status": "True"}]}})
    assert w.owners() == {} and "ns/waiter" in w.woken
    w.state.events.on_job(job)
    w.state.events.on_job_deleted(job)
    assert w.owners() == {}


def _gw(ns: str, priority: int, cls: str | None = None) -> GPUWorkload:
    spec: dict[str, Any] = {"priority": priority}
    if cls:
        spec["priorityClassName"] = cls
    return GPUWorkload.model_validate({"metadata": {"name": "w", "namespace": ns},
                                       "spec": spec})


def test_only_a_priority_class_with_that_value_is_an_admins_priority() -> None:
    """Issue 23, attack 1: a tenant writes spec.priority, never a PriorityClass."""
    classes = {"team-high": 1000}
    state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES,
                           priority_class_value=classes.get)
    assert state.admin_priority(_gw("a", 1000, "team-high"))
    assert not state.admin_priority(_gw("a", 1_000_000_000))  # no class: the tenant's
    assert not state.admin_priority(_gw("a", 1_000_000_000, "team-high"))  # not its value
    assert not state.admin_priority(_gw("a", 1000, "made-up"))  # no such class
    # without a PriorityClass cache nobody preempts across namespaces
    assert not PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES).admin_priority(
        _gw("a", 1000, "team-high"))


def test_the_priority_class_is_copied_to_the_childrens_pods() -> None:
    from api.v1alpha1.types import Placement
    from controllers.gpuworkload.children import build_child

    w = GPUWorkload.model_validate({
        "metadata": {"name": "w", "namespace": "a", "uid": "u"},
        "spec": {"priority": 1000, "priorityClassName": "team-high",
                 "template": {"spec": {"priority": 7, "containers": [
                     {"name": "c", "image": "x"}]}}}})
    child = build_child(w, {"metadata": {"name": "w", "uid": "u"}},
                        Placement(index=0, node="n1", devices=[0]),
                        DeviceExposure.CUDA_VISIBLE_DEVICES, lambda n, d: None)
    assert child["spec"]["priorityClassName"] == "team-high"
    assert "priority" not in child["spec"]  # the API server sets it from the class


class CountingLock:
    """The state's re-entrant lock, counting the critical sections entered from
    outside (nested re-entries are not new sections)."""

    def __init__(self, lock: Any) -> None:
        self.lock, self.sections, self._depth = lock, 0, 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self._depth += 1
        if self._depth == 1:
            self.sections += 1

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        self.lock.release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lock, name)  # the rest of the lock's own (``busy``)


def test_a_deleted_workload_goes_in_one_critical_section() -> None:
    """Its eviction taken in, its pending entry, booking and held-on devices gone,
    and the waiting woken: one section of the lock, so no event or decision sees it
    half gone (it was four before)."""
    low_pod = child("low", "uid-low", "node1", "0,1,2,3")
    w = World(pods=[low_pod, child("busy", "uid-busy", "node2", "0,1,2,3")],
              workloads=[placed("low", [0, 1, 2, 3])])
    assert w.state.decide(gw("high", gpusPerReplica=4, priority="high",
                             schedulingStrategy="priority")).outcome == PREEMPT
    w.state.events.on_pod_deleted(low_pod)
    assert not w.state.decide(gw("waits", gpusPerReplica=1)).ok
    w.state.pending.update({"metadata": {"name": "waits", "namespace": "ns"}, "status": {
        "conditions": [{"type": "Scheduled", "status": "False"}]}})
    counting = CountingLock(w.state._lock)
    w.state._lock = counting  # type: ignore[assignment]
    w.woken.clear()
    w.state.workload_gone("ns/low", "uid-low")  # the victim goes: its hold goes
    assert counting.sections == 1
    assert "ns/high" in w.woken and "ns/waits" in w.woken
    assert w.state.eviction("ns/low") is None and not w.state.departing("ns/low")
