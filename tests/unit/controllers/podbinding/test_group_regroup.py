"""A bound group member whose group cannot be recognised any more (its JobSet
deleted, not in the cache yet, or made again under its name) keeps its group's
booking (controllers/podbinding/groups.py ``GroupPath.regroup``): it is never
re-booked under its Job's key against its own group, reported as a conflict, or
evicted; the booking goes with the last member, as before."""

from __future__ import annotations

from typing import Any

import pytest

from controllers.podbinding.controller import PodBindingOptions, PodBindingReconciler
from internal.scheduling.podgroups import (
    JOB_COMPLETION_INDEX_LABEL,
    JOBSET_JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    JOBSET_REPLICATED_JOB_LABEL,
    JOBSET_RESTART_LABEL,
    JOBSET_UID_LABEL,
    pod_group,
)
from tests.unit.controllers.podbinding.test_pod_groups import GroupEnv, member
from tests.unit.controllers.podbinding.test_podbinding import NS, EvictingClient

KEY = f"PodGroup:{NS}/jobset:js2:0"
NAMES = [f"js2-workers-{j}-{i}" for j in range(2) for i in range(2)]


def jobset(uid: str = "uid-js2") -> dict[str, Any]:
    """Two Jobs of two pods each: one group of four."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js2", "namespace": NS, "uid": uid},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {
                "spec": {"parallelism": 2, "completions": 2}}}]}}


def jobset_pod(job: int, index: int) -> dict[str, Any]:
    p = member("x", 0, gpus=4)
    name = f"js2-workers-{job}-{index}"
    p["metadata"].update(name=name, uid=f"uid-{name}", annotations={}, labels={
        JOBSET_NAME_LABEL: "js2", JOBSET_UID_LABEL: "uid-js2", JOBSET_RESTART_LABEL: "0",
        JOBSET_REPLICATED_JOB_LABEL: "workers", JOBSET_JOB_INDEX_LABEL: str(job),
        JOB_COMPLETION_INDEX_LABEL: str(index)})
    p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                         "name": f"js2-workers-{job}", "uid": f"job-{job}",
                                         "controller": True}]
    return p


class JobSetEnv(GroupEnv):
    """GroupEnv whose owner lookup serves the JobSet ``js2`` while it is there."""

    def __init__(self) -> None:
        self.the_jobset: dict[str, Any] | None = jobset()
        super().__init__()
        self.client = EvictingClient()
        self.rec = self.reconciler(PodBindingOptions(evict_conflicting_pods=True))

    def reconciler(self, options: PodBindingOptions | None = None) -> PodBindingReconciler:
        def owners(api: str, kind: str, ns: str, name: str) -> dict[str, Any] | None:
            return self.the_jobset if (kind, name) == ("JobSet", "js2") else None
        rec = PodBindingReconciler(self.client, self.recorder, self.pods, self.states,
                                   self.book, options or PodBindingOptions(),
                                   recognise=lambda p: pod_group(p, owners))
        self.enqueued = []
        rec.enqueue_after = lambda req, delay: self.enqueued.append(req.name)
        return rec

    def place_and_run(self) -> None:
        """Every member placed with its group, bound, and running (as the API server
        and the kubelet leave it)."""
        for j in range(2):
            for i in range(2):
                self.add(jobset_pod(j, i))
        for name in NAMES:
            self.reconcile(name)
        for b in self.client.bindings:
            p = self.pods.get_by_name(b["metadata"]["name"], NS)
            self.pods.add({**p, "spec": {**p["spec"], "nodeName": b["target"]["name"]},
                           "status": {"phase": "Running"},
                           "metadata": {**p["metadata"], "annotations": {
                               **p["metadata"]["annotations"], **b["metadata"]["annotations"]}}})
        for name in NAMES:
            self.reconcile(name)

    def terminating(self, name: str) -> None:
        p = self.pods.get_by_name(name, NS)
        self.pods.add({**p, "metadata": {**p["metadata"],
                                         "deletionTimestamp": "2026-01-01T00:00:00Z"}})


@pytest.mark.parametrize("jobset_now", ["deleted", "unreadable", "made again"])
def test_a_member_whose_jobset_cannot_be_read_keeps_its_groups_booking(jobset_now: str) -> None:
    env = JobSetEnv()
    env.place_and_run()
    assert sorted(env.bound()) == sorted(NAMES)
    assert env.held() == {f"node{n}": {0, 1, 2, 3} for n in range(1, 5)}
    assert env.state.seeds.seed_pod_keys(env.book, KEY) == [f"{NS}/{n}" for n in NAMES]
    env.the_jobset = None if jobset_now != "made again" else jobset(uid="uid-js2-new")
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
    env.the_jobset = None
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
