"""A pod group's booking is a reclaim candidate as a GPUWorkload's is (no server):
queues a and b of nominal 8 in one cohort on 4 nodes x 4 GPUs. Queue a holds its 8
with a workload of 2 x 4 GPUs and borrows b's 8 with a pod group of 2 x 4 GPUs (its
booking, ``PodGroup:ns-a/...``, every member bound) and one more workload. A
workload of b that needs 8 takes back the newest borrowers first, the group among
them, whole; a group still being placed (a member not bound) is not taken."""

from __future__ import annotations

from api.v1alpha1.types import Placement
from internal.scheduling.framework import PREEMPT
from tests.unit.controllers.queues.test_queue_gate import Cluster

GROUP = "PodGroup:ns-a/jobset:train:0"


def book_group(c: Cluster, nodes: list[str], created: str, *, bound: bool = True) -> None:
    """The pod binding's booking of a 2-member group on ``nodes`` (all 4 devices
    each), admitted by queue a at ``created`` (its oldest member's creation)."""
    ledger = c.state.scheduler.ledger
    ledger.assume(GROUP, [Placement(index=i, node=n, devices=[0, 1, 2, 3])
                          for i, n in enumerate(nodes)], gpus_per_replica=4)
    if bound:
        ledger.commit(GROUP)
    c.book.manager.admit_group(GROUP, created)


def borrowing(group_created: str, *, bound: bool = True) -> Cluster:
    """a0 (8 GPUs, a's nominal), the group (8 more, created ``group_created``) and
    nothing else: a borrows all of b's 8."""
    c = Cluster()
    c.run("ns-a", "a0", replicas=2)  # created 00:00:01, on 2 nodes
    free = sorted({f"node{i}" for i in range(1, 5)}
                  - {p.node for p in c.state.booking("ns-a/a0").placements})
    book_group(c, free, group_created, bound=bound)
    assert c.used() == {"a": 16.0}
    return c


def test_a_newer_group_is_reclaimed_whole_before_an_older_workload() -> None:
    c = borrowing("2026-01-01T00:00:05Z")
    d = c.state.decide(c.submit("ns-b", "b0", replicas=2))
    assert d.outcome == PREEMPT, d.message
    assert d.victims == [GROUP], d.message
    assert d.overlap == [GROUP]
    assert f"lent to a: preempting {GROUP}" in d.message


def test_a_group_is_taken_in_its_place_among_the_borrowers_newest_first() -> None:
    """a1 of 4 GPUs, newer than the group: b0 asking 4 takes a1, the group stays;
    once a1 is gone b1 asking 4 more takes the group (a still borrows 4 with it)."""
    c = Cluster()
    c.run("ns-a", "a0")  # 4 GPUs, 00:00:01
    taken = {c.state.booking("ns-a/a0").placements[0].node}
    free = sorted({f"node{i}" for i in range(1, 5)} - taken)
    book_group(c, free[:2], "2026-01-01T00:00:02Z")
    c.run("ns-a", "a1")  # 4 GPUs, 00:00:03: a holds 16, borrows 8
    assert c.used() == {"a": 16.0}
    d = c.state.decide(c.submit("ns-b", "b0"))
    assert d.outcome == PREEMPT and d.victims == ["ns-a/a1"], d.message
    c.gone("ns-a", "a1")
    d = c.state.decide(c.submit("ns-b", "b1"))
    assert d.outcome == PREEMPT and d.victims == [GROUP], d.message


def test_a_group_with_a_member_not_bound_yet_is_not_taken() -> None:
    """(the group is newer than a0: bound, it would be the victim, as above)"""
    c = borrowing("2026-01-01T00:00:05Z", bound=False)
    d = c.state.decide(c.submit("ns-b", "b0", replicas=2))
    assert d.outcome == PREEMPT and d.victims == ["ns-a/a0"], d.message
