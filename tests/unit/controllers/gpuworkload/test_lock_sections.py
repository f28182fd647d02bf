"""How often one placing reconcile enters the placement cache's lock (issue 33:
the lock is taken for short steps, not across a reconcile's reads one by one).

A 2-replica gang placed on one node, counted with a lock that counts its sections:
the reconcile's own steps are its standing (``standing_of``), the priority gate,
the booking (``decide``'s one locked step), the commit, its nodes' records, what its
children wait for, and each created child's holding (``hold_created``); the rest are
the informers' events of what it wrote (its pods, its status). It was 24 before:
one section per question (a booking, an eviction, a departing hold, each node, each
node's UUIDs, the victims, the blockers, the nomination) and two per pod event."""

from __future__ import annotations

from tests.unit.controllers.fakes import Env, running
from tests.unit.controllers.placement.test_placement_state import CountingLock


def test_a_placing_reconcile_enters_the_cache_lock_a_dozen_times_not_two_dozen() -> None:
    env = Env(gpus=4)
    env.workload("gang", replicas=2, gpusPerReplica=1)
    state = env.state
    counting = CountingLock(state._lock)
    state._lock = counting  # type: ignore[assignment]
    env.reconcile("gang")
    assert env.status("gang")["phase"] == "Scheduled"
    assert len(env.client.of("create", "Pod")) == 2
    # 8 of its own (standing, priority gate, booking, commit, node records, waits,
    # 2 children's holdings) and 4 events (2 pods, 2 status writes)
    assert counting.sections <= 12, counting.sections


def test_a_reconcile_of_a_running_workload_enters_the_lock_twice() -> None:
    """Nothing to place: its standing, and its nodes' records (it was 7)."""
    env = Env(gpus=4)
    env.workload("gang", replicas=2, gpusPerReplica=1)
    env.settle("gang")
    running(env, "gang")
    state = env.state
    counting = CountingLock(state._lock)
    state._lock = counting  # type: ignore[assignment]
    env.reconcile("gang")
    assert counting.sections == 2, counting.sections
