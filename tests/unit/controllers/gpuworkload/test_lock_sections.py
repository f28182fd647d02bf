"""How often one placing reconcile enters the placement cache's lock (issue 33:
the lock is taken for short steps, not across a reconcile's reads one by one).

Counted with a lock that counts its sections. A placing reconcile's own steps are
the booking (``decide``'s one locked step, which also reads what its devices wait
for) and its children's holdings with the commit (``hold_created``: every child it
created, in one section, which commits the booking its status write made durable,
or for one replica in Pod mode the booking its bound pod does). Its standing
(``standing_of``), the priority gate and its nodes' records are read without the
lock when no section is in progress and nothing changed meanwhile. The rest are the informers'
events of what it wrote (its pods, its status). A 2-replica gang took 24
sections three rounds ago (one per question: a booking, an eviction, a departing
hold, each node, each node's UUIDs, the victims, the blockers, the nomination; two
per pod event), 12 two rounds ago, 8 last round (the commit its own section, the
standing read under the lock)."""

from __future__ import annotations

import pytest

from runtime import ApiError
from tests.unit.controllers.fakes import NS, Env, internal, running
from tests.unit.controllers.placement.test_placement_state import CountingLock


def _counted(env: Env) -> CountingLock:
    counting = CountingLock(env.state._lock)
    env.state._lock = counting  # type: ignore[assignment]
    return counting


def test_a_placing_gang_enters_the_cache_lock_twice_of_its_own() -> None:
    env = Env(gpus=4)
    env.workload("gang", replicas=2, gpusPerReplica=1)
    counting = _counted(env)
    env.reconcile("gang")
    assert env.status("gang")["phase"] == "Scheduled"
    assert len(env.client.of("create", "Pod")) == 2
    # 2 of its own (the booking, the children's holdings with the commit) and 4
    # events (2 pods, 2 status writes); 4 of its own before (its standing, the
    # commit)
    assert counting.sections == 6, counting.sections
    assert env.state.is_committed(f"{NS}/gang")


def test_a_gang_whose_child_create_fails_is_committed_all_the_same() -> None:
    """Its status write made the placement durable: a create that fails after it
    leaves the booking committed (as the status says), not in flight, so a refill
    reads it from the status and nothing else is booked on its devices."""
    env = Env(gpus=4)
    env.workload("gang", replicas=2, gpusPerReplica=1)
    env.client.fail[("Pod", "gang-0")] = internal()
    with pytest.raises(ApiError):
        env.reconcile("gang")
    assert env.status("gang")["placements"]
    assert env.state.is_committed(f"{NS}/gang")
    del env.client.fail[("Pod", "gang-0")]
    env.settle("gang")
    assert env.pod("gang-0") is not None and env.pod("gang-1") is not None


def test_one_replica_is_booked_and_committed_in_two_sections_of_its_own() -> None:
    """Its bound pod is its commit point: the pod's holding and the commit are one."""
    env = Env(gpus=4)
    env.workload("one", replicas=1, gpusPerReplica=1)
    counting = _counted(env)
    env.reconcile("one")
    sections = counting.sections
    assert env.status("one")["phase"] == "Scheduled"
    assert env.state.is_committed("ns/one")
    # booking, holding + commit; and the informers' events of its pod and of its
    # two writes of the workload
    assert sections == 5, sections


def test_a_reconcile_of_a_running_workload_does_not_enter_the_lock() -> None:
    """Nothing to place: its standing and its nodes' records are read without the
    lock (it was 7 three rounds ago, 2 two rounds ago, 1 last round)."""
    env = Env(gpus=4)
    env.workload("gang", replicas=2, gpusPerReplica=1)
    env.settle("gang")
    running(env, "gang")
    counting = _counted(env)
    env.reconcile("gang")
    assert counting.sections == 0, counting.sections
