"""A pod group in a namespace a GPUQueue selects is admitted by that queue's quota,
as a GPUWorkload gang is (controllers/podbinding/groupquota.py): the whole group's
GPUs at once, against the queue's usage, where its holdings count; over quota it
holds nothing and each member says which queue and by how much."""

from __future__ import annotations

import random
from typing import Any

from api.v1alpha1.types import DeviceExposure
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState
from controllers.queues.book import QueueBook
from tests.unit.controllers.podbinding.fixtures import GroupEnv, member
from tests.unit.controllers.podbinding.test_podbinding import NS
from tests.unit.controllers.queues.evented import EventedIndexer


def queue(name: str, nominal: int, ns: str = NS, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
            "spec": {"nominalGPUs": nominal,
                     "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                     **spec}}


class QueuedEnv(GroupEnv):
    """GroupEnv (4 named nodes x 4 GPUs) whose placement state has the queues' gate."""

    def __init__(self, *queues: dict[str, Any], require_queue: bool = False) -> None:
        self.queue_cache = EventedIndexer()
        for q in queues:
            self.queue_cache.add(q)
        self.queues = QueueBook(self.queue_cache, EventedIndexer(), EventedIndexer(),
                                require_queue)
        super().__init__()
        self.states = PlacementStateSource(
            lambda books: PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES,
                                         rng=random.Random(1), pod_books=books,
                                         queues=self.queues),
            lambda state: self.fill(state))
        self.states.add_pod_book(self.book)
        self.rec = self.reconciler()

    def used(self) -> dict[str, float]:
        return {q: float(f) for q, f in self.state.queue_usage()[0].items()}

    def bound_of(self, group: str) -> list[str]:
        return sorted(n for n in self.bound() if n.startswith(f"{group}-"))


def test_a_bound_groups_gpus_count_in_its_namespaces_queue() -> None:
    env = QueuedEnv(queue("team", 16))
    env.place("small", 2)
    assert env.bound_of("small") == ["small-0", "small-1"]
    assert env.used() == {"team": 8.0}


def test_a_group_over_its_queues_quota_holds_nothing_and_says_by_how_much() -> None:
    env = QueuedEnv(queue("team", 8))
    env.place("big", 4)
    assert env.bound_of("big") == []
    assert env.state.view().allocation(f"PodGroup:{NS}/label:big") is None
    assert env.held() == {f"node{n}": set() for n in range(1, 5)}
    why = env.warnings("big-0")[-1]
    assert why == (f"pod group {NS}/label:big (4 of 4 members to place): queue team: "
                   "0 of 8 GPUs used; needs 16"), why
    assert env.used() == {}


def test_a_group_within_quota_runs_and_a_bigger_one_runs_once_the_quota_is_raised() -> None:
    env = QueuedEnv(queue("team", 8))
    env.place("small", 2)
    assert env.bound_of("small") == ["small-0", "small-1"]
    env.place("big", 2, gpus=4)  # 8 more: the queue has 8 of 8 used
    assert env.bound_of("big") == []
    assert "queue team: 8 of 8 GPUs used; needs 8" in env.warnings("big-0")[-1]
    q = queue("team", 16)
    q["metadata"]["generation"] = 2
    env.queue_cache.add(q)
    for i in range(2):
        env.reconcile(f"big-{i}")
    for name in list(env.enqueued):
        env.reconcile(name)
    assert env.bound_of("big") == ["big-0", "big-1"]
    assert env.used() == {"team": 16.0}


def test_a_group_borrows_from_its_cohort_as_a_workload_would() -> None:
    env = QueuedEnv(queue("team", 8, cohort="research"),
                    queue("idle", 8, ns="elsewhere", cohort="research"))
    env.place("big", 4)  # 16: its 8 and the 8 its cohort lends
    assert len(env.bound_of("big")) == 4
    assert env.used() == {"team": 16.0}


def test_a_group_in_no_queue_is_placed_as_before() -> None:
    env = QueuedEnv(queue("team", 8, ns="elsewhere"))
    env.place("big", 4)
    assert len(env.bound_of("big")) == 4


def test_a_group_in_no_queue_waits_when_the_manager_requires_one() -> None:
    env = QueuedEnv(queue("team", 8, ns="elsewhere"), require_queue=True)
    env.place("big", 2)
    assert env.bound_of("big") == []
    assert env.warnings("big-0")[-1] == (
        f"pod group {NS}/label:big (2 of 2 members to place): no GPUQueue selects "
        f"namespace {NS}; this manager admits only workloads in a queue (--require-queue)")


def test_a_gpu_pod_of_no_group_in_a_queues_namespace_is_not_placed_one_by_one() -> None:
    """The queue-gpu-pods policy lets a group member through; one whose group labels
    were taken off after it was created would otherwise be placed outside its quota."""
    env = QueuedEnv(queue("team", 8))
    p = member("loose", 0, size=1)
    del p["metadata"]["labels"]
    env.add(p)
    env.reconcile("loose-0")
    assert env.bound() == {}
    assert env.warnings("loose-0") == [
        f"namespace {NS} is in GPUQueue team: a pod requesting nvidia.com/gpu is placed "
        "here only with its queue's quota, as a GPUWorkload or a pod group's member "
        "(docs/podgroups.md)"]


def test_the_queue_policy_lets_through_the_pods_the_binder_knows_as_group_members() -> None:
    from api.v1alpha1.keys import POD_GROUP_LABEL
    from api.v1alpha1.queue_policies import GROUP_LABELS, GROUP_SCHEDULER
    from controllers.podbinding.seedbook import DEFAULT_SCHEDULER_NAME
    from internal.scheduling.podgroups import (
        JOBSET_NAME_LABEL,
        KUEUE_GROUP_LABEL,
        LWS_NAME_LABEL,
    )
    assert GROUP_SCHEDULER == DEFAULT_SCHEDULER_NAME
    assert set(GROUP_LABELS) == {POD_GROUP_LABEL, KUEUE_GROUP_LABEL, JOBSET_NAME_LABEL,
                                 LWS_NAME_LABEL}


def test_a_higher_priority_workload_of_the_groups_queue_may_preempt_the_group() -> None:
    """Priority preemption stays within a queue: the group is of its namespace's
    queue, as the workload is (its ledger key, ``PodGroup:<ns>/...``, was read as
    another namespace's, so the preemption was refused as across queues)."""
    from api.v1alpha1.types import GPUWorkload
    from internal.scheduling.framework import PREEMPT

    env = QueuedEnv(queue("team", 16))
    env.place("big", 4)
    assert len(env.bound_of("big")) == 4
    w = GPUWorkload.model_validate({
        "apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
        "metadata": {"name": "urgent", "namespace": NS, "uid": "uid-urgent",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"gpusPerReplica": 4, "priority": 100, "schedulingStrategy": "priority"}})
    d = env.state.decide(w)
    assert d.outcome == PREEMPT, d.message
    assert d.victims == [f"PodGroup:{NS}/label:big"]
