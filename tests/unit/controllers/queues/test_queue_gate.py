"""The queue gate in ``PlacementState.decide`` (no server): two teams' queues of
nominal 8 in one cohort on 4 nodes x 4 GPUs. A borrows the whole cluster, b
takes its 8 back by reclaim (no more than it needs), a workload above its quota
waits with the queue's message, a gang is never half admitted, and the order
within a queue is BestEffortFIFO."""

from __future__ import annotations

import random
from typing import Any

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.placement.state import PlacementState
from controllers.queues.book import (
    NO_QUEUE,
    QUEUE_NOT_ALLOWED,
    QUEUE_NOT_FOUND,
    QUEUED,
    WAITING_FOR_QUOTA,
    QueueBook,
)
from internal.scheduling.framework import PREEMPT, UNSCHEDULABLE
from tests.unit.controllers.queues.evented import EventedIndexer as Indexer
from tests.unit.scheduling.helpers import node

NODES = [node(f"node{i}", 4) for i in range(1, 5)]


def queue(name: str, nominal: int, ns: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"nominalGPUs": nominal, "cohort": "research",
                     "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                     **spec}}


def child_pod(ns: str, workload: str, node_name: str, devices: list[int],
              index: int = 0) -> dict[str, Any]:
    """Replica ``index`` of ``ns/workload`` (attempt 0), running on ``devices``."""
    ref = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
           "name": workload, "uid": f"uid-{workload}", "controller": True}
    return {"metadata": {"name": f"{workload}-{index}", "namespace": ns,
                         "uid": f"pod-{workload}-{index}", "ownerReferences": [ref],
                         "labels": {"gpu.orchestrator.dev/attempt": "0"},
                         "annotations": {"gpu.orchestrator.dev/devices":
                                         ",".join(map(str, devices))}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


#: PriorityClasses that exist (an admin's priority may preempt across namespaces)
ADMIN_CLASSES = {"urgent": 100}


class Cluster:
    def __init__(self, *queues: dict[str, Any], require_queue: bool = False) -> None:
        self.queues, self.namespaces, self.workloads = Indexer(), Indexer(), Indexer()
        for q in queues or (queue("a", 8, "ns-a"), queue("b", 8, "ns-b")):
            self.queues.add(q)
        self.book = QueueBook(self.queues, self.namespaces, self.workloads, require_queue)
        self.state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(1),
                                    queues=self.book, priority_class_value=ADMIN_CLASSES.get)
        self.state.rebuild(lambda: (NODES, [], [], []))
        self.n = 0

    def submit(self, ns: str, name: str, gpus: int = 4, **spec: Any) -> GPUWorkload:
        self.n += 1
        raw = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
               "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}",
                            "creationTimestamp": f"2026-01-01T00:00:{self.n:02d}Z"},
               "spec": {"gpusPerReplica": gpus, **spec}}
        self.workloads.add(raw)
        return GPUWorkload.model_validate(raw)

    def run(self, ns: str, name: str, gpus: int = 4, **spec: Any) -> None:
        """Admitted, placed, and its pods running (as the informer reports them)."""
        d = self.state.decide(self.submit(ns, name, gpus, **spec))
        assert d.ok, d.message
        for p in d.placements:
            self.state.events.on_pod(child_pod(ns, name, p.node, p.devices, p.index))

    def gone(self, ns: str, name: str, replicas: int = 1) -> None:
        """The pods of ``ns/name`` are gone, and its reconcile (their deletion wakes
        it) has seen them gone: what it held on to as a victim goes too."""
        for i in range(replicas):
            self.state.events.on_pod_deleted(child_pod(ns, name, "", [], i))
        self.state.departed(f"{ns}/{name}")

    def used(self) -> dict[str, float]:
        return {q: float(f) for q, f in self.state.queue_usage()[0].items()}


def test_a_queue_alone_borrows_the_cohort_then_waits_with_the_queues_message() -> None:
    c = Cluster()
    for i in range(4):
        d = c.state.decide(c.submit("ns-a", f"a{i}"))
        assert d.ok and d.queue == "a", d.message
    assert c.used() == {"a": 16.0}
    d = c.state.decide(c.submit("ns-a", "a4"))
    assert (d.outcome, d.wait_reason) == (UNSCHEDULABLE, WAITING_FOR_QUOTA)
    assert d.message == ("queue a: 16 GPUs used, 8 nominal; cohort research has 0 to lend; "
                         "needs 4")
    assert c.state.booking("ns-a/a4") is None


def test_the_lender_reclaims_its_quota_newest_borrower_first_and_no_more_than_it_needs() -> None:
    c = Cluster()
    for i in range(4):
        c.run("ns-a", f"a{i}")
    first = c.state.decide(c.submit("ns-b", "b0"))
    assert first.outcome == PREEMPT, first.message
    assert first.victims == ["ns-a/a3"]  # the newest of a's
    assert "reclaiming 4 GPU(s) of queue b's quota lent to a" in first.message
    assert c.state.eviction("ns-a/a3") == ("reclaimed by queue b for ns-b/b0; "
                                          "waiting to be placed again")
    second = c.state.decide(c.submit("ns-b", "b1"))
    assert second.outcome == PREEMPT and second.victims == ["ns-a/a2"], second.message
    # the victims' pods hold until they are gone, and count until then
    assert c.used() == {"a": 16.0, "b": 8.0}
    c.gone("ns-a", "a3")
    c.gone("ns-a", "a2")
    # b holds its nominal; a is back to its own: nothing more is taken from a
    assert c.used() == {"a": 8.0, "b": 8.0}
    third = c.state.decide(c.submit("ns-b", "b2"))
    assert (third.outcome, third.wait_reason) == (UNSCHEDULABLE, WAITING_FOR_QUOTA)
    assert c.state.booking("ns-a/a1") is not None and c.state.booking("ns-a/a0") is not None


def test_the_queue_reclaimed_from_cannot_take_it_back() -> None:
    c = Cluster()
    for i in range(4):
        c.run("ns-a", f"a{i}")
    for i in range(2):
        assert c.state.decide(c.submit("ns-b", f"b{i}")).outcome == PREEMPT
    # a's victims come back, even at the highest priority: a is at its nominal and
    # b is not borrowing, so there is nothing a may reclaim
    again = c.state.decide(c.submit("ns-a", "a3-again", priority=1_000_000))
    assert again.outcome == UNSCHEDULABLE and again.wait_reason == WAITING_FOR_QUOTA
    assert c.state.eviction("ns-b/b0") is None and c.state.eviction("ns-b/b1") is None


def test_a_gang_is_admitted_whole_or_not_at_all() -> None:
    c = Cluster(queue("a", 8, "ns-a", borrowingLimit=0), queue("b", 8, "ns-b"))
    assert c.state.decide(c.submit("ns-a", "small")).ok
    gang = c.state.decide(c.submit("ns-a", "gang", replicas=2))  # 2 x 4 > 4 left
    assert gang.wait_reason == WAITING_FOR_QUOTA
    assert gang.message == "queue a: 4 of 8 GPUs used; cohort research has 8 to lend; needs 8"
    assert c.state.booking("ns-a/gang") is None and c.used() == {"a": 4.0}


def test_a_workload_without_a_usable_queue_waits_with_the_reason() -> None:
    c = Cluster(require_queue=True)
    missing = c.state.decide(c.submit("ns-a", "m", queueName="nope"))
    assert (missing.wait_reason, missing.message) == (QUEUE_NOT_FOUND,
                                                      "GPUQueue nope does not exist")
    other = c.state.decide(c.submit("ns-a", "o", queueName="b"))
    assert other.wait_reason == QUEUE_NOT_ALLOWED
    assert "does not admit namespace ns-a" in other.message
    none = c.state.decide(c.submit("elsewhere", "n"))
    assert none.wait_reason == NO_QUEUE


def test_without_require_queue_a_workload_in_no_queue_is_placed_as_today() -> None:
    c = Cluster()
    d = c.state.decide(c.submit("elsewhere", "n", gpus=4))
    assert d.ok and d.queue is None and not d.wait_reason


def test_best_effort_fifo_a_blocked_head_does_not_stall_a_smaller_workload() -> None:
    c = Cluster(queue("a", 8, "ns-a", borrowingLimit=0), queue("b", 8, "ns-b"))
    assert c.state.decide(c.submit("ns-a", "running")).ok  # 4 of 8
    big = c.state.decide(c.submit("ns-a", "big", gpus=8))
    assert big.wait_reason == WAITING_FOR_QUOTA
    small = c.state.decide(c.submit("ns-a", "small", gpus=4))
    assert small.ok, small.message  # the head needs 8: it does not stall a 4


def test_a_younger_workload_waits_while_an_older_one_of_its_queue_fits() -> None:
    c = Cluster(queue("a", 8, "ns-a", borrowingLimit=0), queue("b", 8, "ns-b"))
    assert c.state.decide(c.submit("ns-a", "r0")).ok
    assert c.state.decide(c.submit("ns-a", "r1")).ok
    old = c.submit("ns-a", "old", gpus=4)
    assert c.state.decide(old).wait_reason == WAITING_FOR_QUOTA
    young = c.submit("ns-a", "young", gpus=4)
    c.state.forget("ns-a/r1")  # 4 GPUs of quota free again
    d = c.state.decide(young)
    assert (d.wait_reason, d.message) == (
        QUEUED, "waiting behind ns-a/old in queue a (priority, then creation time)")
    assert c.state.decide(old).ok


def test_across_borrowing_queues_the_lowest_weighted_share_goes_first() -> None:
    c = Cluster(queue("a", 4, "ns-a"), queue("b", 4, "ns-b"), queue("c", 8, "ns-c"))
    for ns, name in (("ns-a", "a0"), ("ns-a", "a1"), ("ns-b", "b0"), ("ns-c", "c0")):
        assert c.state.decide(c.submit(ns, name)).ok
    b_wait = c.submit("ns-b", "b-wait")
    assert c.state.decide(b_wait).wait_reason == WAITING_FOR_QUOTA
    a_wait = c.submit("ns-a", "a-wait")
    assert c.state.decide(a_wait).wait_reason == WAITING_FOR_QUOTA
    c.state.forget("ns-c/c0")  # 4 GPUs to lend again
    d = c.state.decide(a_wait)  # a borrows 4 already, b nothing: b goes first
    assert d.wait_reason == QUEUED
    assert d.message.startswith("waiting for ns-b/b-wait of queue b: queue a borrows more")
    assert c.state.decide(b_wait).ok


def test_priority_preemption_never_takes_another_queues_guaranteed_quota() -> None:
    c = Cluster()
    for i in range(2):
        assert c.state.decide(c.submit("ns-a", f"a{i}")).ok  # a within its 8
    for i in range(2):  # b within its 8, nothing of b's the urgent one may preempt
        assert c.state.decide(c.submit("ns-b", f"b{i}", priority=100)).ok
    urgent = c.state.decide(c.submit("ns-b", "urgent", priority=100,
                                     priorityClassName="urgent",
                                     schedulingStrategy="priority"))
    # an admin's priority may preempt across namespaces, but b would go to 12: not a
    # reclaim; and a's 8 are a's, whatever the priority
    assert urgent.outcome == UNSCHEDULABLE and urgent.wait_reason == WAITING_FOR_QUOTA
    assert c.state.eviction("ns-a/a0") is None and c.state.eviction("ns-a/a1") is None


def test_priority_preemption_within_one_queue_still_works() -> None:
    c = Cluster(queue("a", 16, "ns-a"), queue("b", 0, "ns-b"))
    for i in range(4):
        assert c.state.decide(c.submit("ns-a", f"a{i}")).ok
    urgent = c.state.decide(c.submit("ns-a", "urgent", priority=100,
                                     schedulingStrategy="priority"))
    assert urgent.outcome == PREEMPT and urgent.queue == "a", urgent.message


def test_a_workload_in_no_queue_never_preempts_one_in_a_queue() -> None:
    c = Cluster()
    for i in range(4):
        assert c.state.decide(c.submit("ns-a", f"a{i}")).ok
    d = c.state.decide(c.submit("elsewhere", "urgent", priority=100,
                                priorityClassName="urgent", schedulingStrategy="priority"))
    assert d.outcome == UNSCHEDULABLE and d.queue is None and not d.wait_reason
    assert all(c.state.eviction(f"ns-a/a{i}") is None for i in range(4))


def gpu_pod(name: str, ns: str, node_name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
            "spec": {"nodeName": node_name, "containers": [
                {"name": "c", "image": "x",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


def test_a_plain_gpu_pod_in_a_queues_namespace_counts_against_its_quota() -> None:
    c = Cluster(queue("a", 8, "ns-a", borrowingLimit=0), queue("b", 8, "ns-b"))
    c.state.events.on_pod(gpu_pod("sneaky", "ns-a", "node1", 4))
    assert c.used() == {"a": 4.0}
    assert c.state.decide(c.submit("ns-a", "w0")).ok
    d = c.state.decide(c.submit("ns-a", "w1"))
    assert d.wait_reason == WAITING_FOR_QUOTA and d.message.startswith("queue a: 8 of 8")


def test_a_share_counts_as_its_fraction_of_a_gpu() -> None:
    c = Cluster(queue("a", 1, "ns-a", borrowingLimit=0), queue("b", 8, "ns-b"))
    for i in range(4):
        d = c.state.decide(c.submit("ns-a", f"s{i}", gpus=1, gpuShare={"fraction": "0.25"}))
        assert d.ok, d.message
    assert c.used() == {"a": 1.0}
    d = c.state.decide(c.submit("ns-a", "s4", gpus=1, gpuShare={"fraction": "0.25"}))
    assert d.message == "queue a: 1 of 1 GPUs used; cohort research has 8 to lend; needs 0.25"


def test_within_queue_lower_priority_makes_room_in_its_own_quota() -> None:
    c = Cluster(queue("a", 8, "ns-a", borrowingLimit=0,
                      preemption={"withinQueue": "LowerPriority"}), queue("b", 8, "ns-b"))
    c.run("ns-a", "low0", priority=1)
    c.run("ns-a", "low1", priority=1)
    d = c.state.decide(c.submit("ns-a", "high", priority=50))
    assert d.outcome == PREEMPT and d.victims == ["ns-a/low1"], d.message
    assert c.state.eviction("ns-a/low1") == (
        "preempted by ns-a/high within queue a to fit its quota; waiting to be placed again")
    # the default, withinQueue Never, waits instead
    c2 = Cluster(queue("a", 8, "ns-a", borrowingLimit=0), queue("b", 8, "ns-b"))
    for name in ("low0", "low1"):
        assert c2.state.decide(c2.submit("ns-a", name, priority=1)).ok
    assert c2.state.decide(c2.submit("ns-a", "high", priority=50)).wait_reason == \
        WAITING_FOR_QUOTA


def test_a_victims_terminating_pods_still_count_against_its_queue() -> None:
    """a may use 12 (8 + borrowing 4). b reclaims one of a's; until that victim's pod
    is gone, a's live pods are still 12: a's next workload waits, though 4 devices
    are free, so that a's live pods never exceed its quota."""
    c = Cluster(queue("a", 8, "ns-a", borrowingLimit=4), queue("b", 8, "ns-b"))
    for i in range(3):
        c.run("ns-a", f"a{i}")
    b0 = c.state.decide(c.submit("ns-b", "b0", replicas=2))  # 2 x 4: one of a's must go
    assert b0.outcome == PREEMPT and len(b0.victims) == 1, b0.message
    assert c.used()["a"] == 12.0  # the victim's pod is still running
    d = c.state.decide(c.submit("ns-a", "a3"))
    assert d.wait_reason == WAITING_FOR_QUOTA and d.message.startswith("queue a: 12 of 12")


def test_a_memory_share_counts_as_its_part_of_the_devices_memory() -> None:
    """Devices of 80Gi (GPUNodes): a 20Gi share is a quarter of a GPU."""
    from tests.unit.scheduling.helpers import gpunode

    c = Cluster(queue("a", 1, "ns-a", borrowingLimit=0), queue("b", 8, "ns-b"))
    gpunodes = [gpunode(f"node{i}", 4, memory=81920) for i in range(1, 5)]
    for g in gpunodes:  # a heartbeat in the future is fresh
        g["status"]["lastHeartbeatTime"] = "2999-01-01T00:00:00Z"
    c.state.rebuild(lambda: (NODES, gpunodes, [], []))
    for i in range(4):
        d = c.state.decide(c.submit("ns-a", f"m{i}", gpus=1, gpuShare={"memory": "20Gi"}))
        assert d.ok, d.message
    assert c.used() == {"a": 1.0}
    assert c.state.decide(c.submit("ns-a", "m4", gpus=1, gpuShare={"memory": "20Gi"})
                          ).wait_reason == WAITING_FOR_QUOTA


def test_a_borrower_still_making_its_pods_is_not_reclaimed() -> None:
    """A booking whose pods are not all there yet may be creating them: released, its
    devices would look free to others while its pods land on them. Reclaim waits."""
    c = Cluster()
    for i in range(3):
        c.run("ns-a", f"a{i}")
    assert c.state.decide(c.submit("ns-a", "starting")).ok  # booked, no pod yet
    d = c.state.decide(c.submit("ns-b", "b0"))
    assert d.outcome == PREEMPT and d.victims == ["ns-a/a2"], d.message  # not "starting"



def test_a_reclaimer_waits_for_every_victims_pods_not_only_those_on_its_devices() -> None:
    """a and b lend each other 4 of a cohort of 8 on a cluster of 16; a borrows b's 4
    as eight 1-GPU workloads. b's 2-GPU workload takes two of them back: one for its
    devices, the other for the quota alone, away from the devices it is given. That
    victim's pod counts against the cohort until it is gone (terminating, in its
    grace period): the reclaimer's pods wait for it too, or the cohort runs more
    than its 8."""
    c = Cluster(queue("a", 4, "ns-a"), queue("b", 4, "ns-b"))
    for i in range(8):
        c.run("ns-a", f"a{i}", gpus=1)
    where = {f"a{i}": {(p.node, d) for p in c.state.booking(f"ns-a/a{i}").placements
                       for d in p.devices} for i in range(8)}
    b0 = c.state.decide(c.submit("ns-b", "b0", gpus=2))
    assert b0.outcome == PREEMPT and sorted(b0.victims) == ["ns-a/a6", "ns-a/a7"], b0.message
    mine = {(p.node, d) for p in b0.placements for d in p.devices}
    elsewhere = [v for v in ("a6", "a7") if not where[v] & mine]
    assert elsewhere, "every victim stands on the reclaimer's devices: nothing to show"
    for v in ("a6", "a7"):
        c.state.evicted(f"ns-a/{v}")  # its reconcile took the eviction in, deleted its pod
    # the victims' pods are terminating: the reclaimer's pods wait for both
    blockers = c.state.blockers("ns-b/b0")
    waited = {n for names in blockers.values() for n in names}
    assert {f"ns-a/{v}-0" for v in elsewhere} <= waited, blockers
    assert sum(c.used().values()) == 10.0  # a's 8, its victims' too, and b0's 2
    c.gone("ns-a", "a6")
    assert c.state.blockers("ns-b/b0") != {}  # a7's pod is still there
    c.gone("ns-a", "a7")
    assert c.state.blockers("ns-b/b0") == {}
    assert c.used() == {"a": 6.0, "b": 2.0}


def test_a_victim_placed_again_counts_again_for_the_next_reclaim() -> None:
    """Three queues of nominal 4 (a cohort of 12) on 16 GPUs. b0 reclaims c1; c1's pod
    goes and, room made by c0's deletion, c1 is placed again (keeping its owner, as
    an eviction spends no retry) before b0's pods are made. b1's reclaim must count
    c1's new booking: planned as if c1 were still being taken, it takes a1 alone
    (1 GPU for its 2) and the cohort runs 13 GPUs of its 12 once a1's pod is gone."""
    zones = [node(f"node{i}", 4, labels={"pool": f"n{i}", "zone": "z" if i > 2 else "y"})
             for i in range(1, 5)]
    c = Cluster(queue("a", 4, "ns-a"), queue("b", 4, "ns-b"), queue("c", 4, "ns-c"))
    c.state.rebuild(lambda: (zones, [], [], []))
    c.run("ns-a", "a0", 4, nodeSelector={"pool": "n1"})
    c.run("ns-a", "a1", 1, nodeSelector={"pool": "n2"})
    c.run("ns-c", "c0", 4, nodeSelector={"pool": "n3"})
    c.run("ns-c", "c1", 3, nodeSelector={"zone": "z"})
    b0 = c.state.decide(c.submit("ns-b", "b0", 2, nodeSelector={"pool": "n2"}))
    assert b0.outcome == PREEMPT and b0.victims == ["ns-c/c1"], b0.message
    c.state.evicted("ns-c/c1")
    c.gone("ns-c", "c1")
    c.state.events.on_pod_deleted(child_pod("ns-c", "c0", "", []))  # c0 deleted
    c.state.forget("ns-c/c0")
    c.run("ns-a", "a2", 2, nodeSelector={"zone": "z"})
    again = c.state.decide(GPUWorkload.model_validate(c.workloads.get_by_name("c1", "ns-c")))
    assert again.ok, again.message
    for p in again.placements:
        c.state.events.on_pod(child_pod("ns-c", "c1", p.node, p.devices, p.index))
    assert c.used() == {"a": 7.0, "b": 2.0, "c": 3.0}  # the cohort's 12
    b1 = c.state.decide(c.submit("ns-b", "b1", 2, nodeSelector={"pool": "n2"}))
    assert b1.outcome == PREEMPT, b1.message
    taken = sum(4 if v == "ns-a/a0" else 2 if v == "ns-a/a2" else 1 for v in b1.victims)
    assert 12 - taken + 2 <= 12, f"{b1.message}: the cohort would run {12 - taken + 2} of 12"
