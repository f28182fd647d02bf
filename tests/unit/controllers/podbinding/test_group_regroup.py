"""A bound group member whose group cannot be recognised any more (its JobSet
deleted, not in the cache yet, or made again under its name) keeps its group's
booking (controllers/podbinding/groups.py ``GroupPath.regroup``): it is never
re-booked under its Job's key against its own group, reported as a conflict, or
evicted; the booking goes with the last member, as before."""

from __future__ import annotations

from typing import Any

import pytest

from controllers.podbinding.controller import PodBindingOptions
from tests.unit.controllers.podbinding.fixtures import OwnedEnv, jobset_member, jobset_of
from tests.unit.controllers.podbinding.test_podbinding import NS, EvictingClient

KEY = f"PodGroup:{NS}/jobset:js2:0"
NAMES = [f"js2-workers-{j}-{i}" for j in range(2) for i in range(2)]


def jobset(uid: str = "uid-js2") -> dict[str, Any]:
    """Two Jobs of two pods each: one group of four."""
    return jobset_of("js2", uid, replicas=2, pods=2)


def jobset_pod(job: int, index: int) -> dict[str, Any]:
    return jobset_member("js2", "workers", job, index, uid="uid-js2", job_uid=f"job-{job}")


class JobSetEnv(OwnedEnv):
    """OwnedEnv serving the JobSet ``js2`` while it is there."""

    def __init__(self) -> None:
        super().__init__("JobSet", "js2", jobset(),
                         options=PodBindingOptions(evict_conflicting_pods=True))
        self.client = EvictingClient()
        self.rec = self.reconciler()

    def place_and_run(self) -> None:
        """Every member placed with its group, bound, and running (as the API server
        and the kubelet leave it)."""
        for j in range(2):
            for i in range(2):
                self.add(jobset_pod(j, i))
        for name in NAMES:
            self.reconcile(name)
        self.show_bindings()
        for name in NAMES:
            self.reconcile(name)


@pytest.mark.parametrize("jobset_now", ["deleted", "unreadable", "made again"])
def test_a_member_whose_jobset_cannot_be_read_keeps_its_groups_booking(jobset_now: str) -> None:
    env = JobSetEnv()
    env.place_and_run()
    assert sorted(env.bound()) == sorted(NAMES)
    assert env.held() == {f"node{n}": {0, 1, 2, 3} for n in range(1, 5)}
    assert env.state.seeds.seed_pod_keys(env.book, KEY) == [f"{NS}/{n}" for n in NAMES]
    env.owner = None if jobset_now != "made again" else jobset(uid="uid-js2-new")
    for name in NAMES:
        if jobset_now == "deleted":  # its Jobs and pods go, in the background
            env.terminating(name)
        env.reconcile(name)
    conflicts = [(n, m) for n, _, r, m in env.recorder.events if r == "DeviceConflict"]
    assert conflicts == []
    assert env.client.evictions == []
    assert env.state.seeds.seed_pod_keys(env.book, KEY) == [f"{NS}/{n}" for n in NAMES]
    assert {env.holder(f"node{n}", d) for n in range(1, 5) for d in range(4)} == {KEY}


def test_the_booking_goes_with_the_last_member_once_its_jobset_is_gone() -> None:
    env = JobSetEnv()
    env.place_and_run()
    env.owner = None
    for name in NAMES:
        env.terminating(name)
        env.reconcile(name)
    for name in NAMES:
        assert env.held() != {f"node{n}": set() for n in range(1, 5)}
        env.pods.delete(f"{NS}/{name}")
        env.reconcile(name)
    assert env.held() == {f"node{n}": set() for n in range(1, 5)}
    assert env.state.view().allocation(KEY) is None
    assert env.client.evictions == []
