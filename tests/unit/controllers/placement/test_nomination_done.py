"""A preemptor's nomination ends when its children are made
(``PlacementState.nomination_done``): its booking no longer names the owners it was
booked over. Otherwise a victim placed again under the same owner (an eviction
spends no retry, so its attempt, and owner, stay) still looked "being taken": the
queue gate plans a reclaim from the use left once the preemptions under way are
done, so the victim's queue looked within its nominal while it borrowed, and a
queue under its nominal waited for quota it was owed (the queue churn test's
"1 GPU within nominal, lent out, not reclaimed")."""

from __future__ import annotations

from internal.scheduling.framework import PREEMPT
from tests.unit.controllers.queues.test_queue_gate import Cluster, child_pod


def test_a_victim_placed_again_is_reclaimable_once_its_preemptor_runs() -> None:
    c = Cluster()
    for i in range(4):
        c.run("ns-a", f"a{i}")  # a borrows the whole cluster
    b0 = c.state.decide(c.submit("ns-b", "b0", 1))
    assert b0.outcome == PREEMPT and b0.victims == ["ns-a/a3"], b0.message
    c.gone("ns-a", "a3")
    p = b0.placements[0]
    c.state.events.on_pod(child_pod("ns-b", "b0", p.node, p.devices))
    c.state.nomination_done("ns-b/b0")  # its reconcile made its children
    # a2 is deleted; a3 (same attempt, same owner) is placed again, and borrows
    c.gone("ns-a", "a2")
    c.state.events.on_workload_deleted({"metadata": {"name": "a2", "namespace": "ns-a",
                                                     "uid": "uid-a2"}})
    again = c.state.decide(c.submit("ns-a", "a3"))
    assert again.ok, again.message
    for q in again.placements:
        c.state.events.on_pod(child_pod("ns-a", "a3", q.node, q.devices, q.index))
    assert c.used() == {"a": 12.0, "b": 1.0}
    # b, under its nominal, needs 4 of the 3 free GPUs: a borrows 4 (a3's)
    b1 = c.state.decide(c.submit("ns-b", "b1", 4))
    assert b1.outcome == PREEMPT and b1.victims == ["ns-a/a3"], b1.message
