"""A pod group refused by its queue's quota takes its place in the queue's waiting
line (controllers/podbinding/groupquota.py, BestEffortFIFO): a later GPUWorkload of
the same queue waits behind it while it fits, rather than taking the quota freed
first; it leaves the line once placed, or once a member of it is gone."""

from __future__ import annotations

from api.v1alpha1.types import GPUWorkload
from controllers.queues.book import QUEUED, WAITING_FOR_QUOTA
from tests.unit.controllers.podbinding.test_group_queues import QueuedEnv, queue
from tests.unit.controllers.podbinding.test_podbinding import NS

BIG = f"PodGroup:{NS}/label:big"


def later_workload(name: str, gpus: int = 4) -> GPUWorkload:
    return GPUWorkload.model_validate({
        "apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"gpusPerReplica": gpus}})


def test_a_later_workload_waits_behind_a_group_that_fits_the_freed_quota() -> None:
    env = QueuedEnv(queue("team", 8))
    env.place("small", 1)  # 4 of 8
    env.place("big", 2)  # 8 more: refused for quota, in the line
    assert env.bound_of("big") == []
    env.gone("small-0")  # the quota frees: the group fits now
    d = env.state.decide(later_workload("eval"))
    assert (d.wait_reason, d.message) == (
        QUEUED, f"waiting behind {BIG} in queue team (priority, then creation time)"), d.message
    assert env.queues.manager.line("team") == [BIG]
    for i in range(2):
        env.reconcile(f"big-{i}")
    assert env.bound_of("big") == ["big-0", "big-1"]
    assert env.queues.manager.line("team") == []  # placed: in no line
    d = env.state.decide(later_workload("eval"))
    assert d.wait_reason == WAITING_FOR_QUOTA, d.message  # 8 of 8: its own quota wait


def test_a_group_that_does_not_fit_stalls_nobody_and_leaves_the_line_with_a_member() -> None:
    env = QueuedEnv(queue("team", 8))
    env.place("small", 1)
    env.place("big", 2)
    d = env.state.decide(later_workload("eval"))  # 4 + 4: fits; the group does not
    assert d.ok, d.message
    env.gone("big-0")  # a member gone: the group is incomplete
    assert env.queues.manager.line("team") == []
