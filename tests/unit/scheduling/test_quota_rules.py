"""Quota rules at their edges (internal/scheduling/quota.py): a GPUQueue read into the
arithmetic, what a queue with nothing used is told and shows, a full cohort that
lends nothing, and whom a reclaim passes over without stopping its search."""

from __future__ import annotations

from fractions import Fraction as F

from api.v1alpha1.queues import GPUQueue, ReclaimWithinCohort, WithinQueue
from internal.scheduling.quota import (
    Candidate,
    Queue,
    QueueUsage,
    Quotas,
    gpus_text,
    reclaimable,
    without,
)


def gpuqueue(name: str, **spec: object) -> GPUQueue:
    return GPUQueue.model_validate({"metadata": {"name": name}, "spec": spec})


def test_a_gpuqueue_is_read_with_its_limits_cohort_weight_and_preemption() -> None:
    q = Queue.of(gpuqueue("research", nominalGPUs=8, borrowingLimit=4, lendingLimit=2,
                          cohort="lab", weight=3,
                          preemption={"reclaimWithinCohort": "LowerPriority",
                                      "withinQueue": "LowerPriority"}))
    assert q == Queue("research", F(8), borrowing_limit=F(4), lending_limit=F(2),
                      cohort="lab", weight=3, reclaim=ReclaimWithinCohort.LOWER_PRIORITY,
                      within=WithinQueue.LOWER_PRIORITY)
    assert q.reserved == 6 and q.ceiling() == 12


def test_a_gpuqueue_without_limits_borrows_and_lends_all_it_can() -> None:
    q = Queue.of(gpuqueue("solo", nominalGPUs=4, cohort=""))
    assert q == Queue("solo", F(4))  # no cohort, weight 1, reclaim Any, within Never
    assert q.ceiling() == 4
    open_q = Queue.of(gpuqueue("open", nominalGPUs=4, cohort="lab"))
    assert open_q.borrowing_limit is None and open_q.lending_limit is None
    assert open_q.ceiling() is None and open_q.lendable == 4


def test_a_lending_limit_above_the_nominal_lends_the_nominal() -> None:
    q = Queue.of(gpuqueue("q", nominalGPUs=4, lendingLimit=10, cohort="lab"))
    assert q.lending_limit == 4 and q.reserved == 0


def test_gpus_rounding_to_a_whole_number_reads_as_one() -> None:
    assert gpus_text(F(2999, 1000)) == "3"
    assert gpus_text(F(5, 2)) == "2.5"


def test_a_queue_that_uses_nothing_yet_is_told_and_shown_zero() -> None:
    qs = Quotas([Queue("solo", F(8)), Queue("a", F(4), cohort="c"), Queue("b", F(4), cohort="c")])
    solo, a = qs.get("solo"), qs.get("a")
    assert solo is not None and a is not None
    assert qs.check(solo, F(10), {}) == "queue solo: 0 of 8 GPUs used; needs 10"
    assert qs.check(a, F(2), {"b": F(8)}) == (
        "queue a: 0 GPUs used, 4 nominal; cohort c has 0 to lend; needs 2")
    assert qs.usage(a, {"b": F(6)}) == QueueUsage(used=F(0), borrowed=F(0), lent=F(2))
    assert qs.share(a, {}) == 0


def test_a_cohort_using_all_its_quota_lends_nothing() -> None:
    qs = Quotas([Queue("a", F(4), cohort="c"), Queue("b", F(4), cohort="c")])
    a, b = qs.get("a"), qs.get("b")
    assert a is not None and b is not None
    used = {"a": F(6), "b": F(2)}
    assert qs.usage(b, used) == QueueUsage(used=F(2), borrowed=F(0), lent=F(2))
    full = {"a": F(4), "b": F(4)}
    assert qs.usage(a, full) == QueueUsage(used=F(4), borrowed=F(0), lent=F(0))


def C(key: str, queue: str, priority: int = 0, created: str = "t0", gpus: int = 4) -> Candidate:
    return Candidate(key, key, queue, priority, created, F(gpus))


def cohort(**a: object) -> Quotas:
    return Quotas([Queue("a", F(8), cohort="c", **a),  # type: ignore[arg-type]
                   Queue("b", F(8), cohort="c"), Queue("x", F(8), cohort="other")])


def test_reclaim_goes_past_workloads_it_may_not_take_to_those_it_may() -> None:
    qs = cohort(within=WithinQueue.LOWER_PRIORITY, reclaim=ReclaimWithinCohort.LOWER_PRIORITY)
    a = qs.get("a")
    assert a is not None
    used = {"a": F(4), "b": F(16), "x": F(12)}
    cands = [C("mine-equal", "a", priority=5),  # its own queue, not lower
             C("other-cohort", "x", priority=0),  # borrowing, but not of a's cohort
             C("b-higher", "b", priority=9),  # b borrows, but priority not lower
             C("b-lower", "b", priority=1)]
    assert [c.key for c in reclaimable(qs, a, 5, F(4), used, cands)] == ["b-lower"]


def test_reclaim_goes_past_a_queue_within_its_nominal() -> None:
    qs = Quotas([Queue("a", F(8), cohort="c"), Queue("b", F(8), cohort="c"),
                 Queue("d", F(8), cohort="c")])
    a = qs.get("a")
    assert a is not None
    cands = [C("d1", "d"), C("b1", "b")]
    # d's use is not known (nothing counted): not borrowing; b borrows
    assert [c.key for c in reclaimable(qs, a, 0, F(4), {"b": F(12)}, cands)] == ["b1"]


def test_within_queue_never_takes_a_workload_of_equal_priority() -> None:
    qs = cohort(within=WithinQueue.LOWER_PRIORITY)
    a = qs.get("a")
    assert a is not None
    cands = [C("same", "a", priority=5), C("lower", "a", priority=4)]
    assert [c.key for c in reclaimable(qs, a, 5, F(4), {"a": F(8)}, cands)] == ["lower"]


def test_a_victim_of_a_queue_with_nothing_counted_leaves_it_at_zero() -> None:
    assert without({"a": F(2)}, [C("v", "b", gpus=4)]) == {"a": F(2), "b": F(0)}
