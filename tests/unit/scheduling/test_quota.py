"""Quota arithmetic of GPU queues: nominal, borrowing and lending within a cohort,
what a waiting workload is told, fair share, and whom a reclaim may take from
(and that the queue it took from can never take it back)."""

from __future__ import annotations

from fractions import Fraction as F

from api.v1alpha1.queues import ReclaimWithinCohort, WithinQueue
from internal.scheduling.quota import Candidate, Queue, Quotas, gpus_text, reclaimable, without


def two(**a: object) -> Quotas:
    return Quotas([Queue("a", F(8), cohort="research", **a),  # type: ignore[arg-type]
                   Queue("b", F(8), cohort="research")])


def test_a_queue_without_cohort_takes_up_to_its_nominal_and_says_so() -> None:
    qs = Quotas([Queue("solo", F(8))])
    q = qs.get("solo")
    assert q is not None
    assert qs.check(q, F(8), {}) is None
    assert qs.check(q, F(4), {"solo": F(6)}) == "queue solo: 6 of 8 GPUs used; needs 4"


def test_a_queue_alone_in_its_cohort_borrows_the_others_unused_quota() -> None:
    qs = two()
    a = qs.get("a")
    assert a is not None
    assert qs.fits(a, F(16), {})
    assert qs.check(a, F(4), {"a": F(16)}) == (
        "queue a: 16 GPUs used, 8 nominal; cohort research has 0 to lend; needs 4")
    assert qs.usage(a, {"a": F(16)}).borrowed == 8


def test_the_borrowing_limit_caps_a_queue_and_its_message_names_the_ceiling() -> None:
    qs = two(borrowing_limit=F(4))
    a = qs.get("a")
    assert a is not None
    assert qs.fits(a, F(12), {})
    assert not qs.fits(a, F(13), {})
    assert qs.check(a, F(1), {"a": F(12)}) == (
        "queue a: 12 of 12 GPUs used; cohort research has 4 to lend; needs 1")


def test_the_lending_limit_keeps_the_rest_of_a_nominal_for_its_queue() -> None:
    qs = Quotas([Queue("a", F(8), cohort="c"), Queue("b", F(8), cohort="c", lending_limit=F(2))])
    a, b = qs.get("a"), qs.get("b")
    assert a is not None and b is not None
    assert qs.fits(a, F(10), {}) and not qs.fits(a, F(11), {})
    # b's 6 reserved GPUs are b's even while a borrows everything it may
    assert qs.fits(b, F(6), {"a": F(10)})
    assert qs.to_lend(a, {}) == 2


def test_shares_count_as_fractions() -> None:
    qs = Quotas([Queue("s", F(1))])
    q = qs.get("s")
    assert q is not None
    assert qs.fits(q, F(1, 4), {"s": F(3, 4)})
    assert qs.check(q, F(1, 2), {"s": F(3, 4)}) == "queue s: 0.75 of 1 GPUs used; needs 0.5"
    assert gpus_text(F(1, 3)) == "0.33"


def test_lent_is_what_borrowers_use_of_the_lenders_unused_quota() -> None:
    qs = two()
    a, b = qs.get("a"), qs.get("b")
    assert a is not None and b is not None
    used = {"a": F(12), "b": F(2)}
    assert qs.usage(b, used).lent == 4
    assert qs.usage(a, used).lent == 0 and qs.usage(a, used).borrowed == 4


def test_fair_share_is_borrowed_over_weight() -> None:
    qs = Quotas([Queue("a", F(4), cohort="c", weight=2), Queue("b", F(4), cohort="c")])
    a, b = qs.get("a"), qs.get("b")
    assert a is not None and b is not None
    used = {"a": F(8), "b": F(6)}
    assert qs.share(a, used) == 2 and qs.share(b, used) == 2
    assert qs.share(a, {"a": F(2)}) == 0


def C(key: str, queue: str, priority: int = 0, created: str = "t0", gpus: int = 4) -> Candidate:
    return Candidate(key, f"owner-{key}", queue, priority, created, F(gpus))


def test_reclaim_takes_borrowers_lowest_priority_then_newest_first() -> None:
    qs = two()
    b = qs.get("b")
    assert b is not None
    cands = [C("a/old", "a", 0, "t1"), C("a/new", "a", 0, "t4"), C("a/high", "a", 5, "t9"),
             C("b/mine", "b", 0, "t0")]
    got = reclaimable(qs, b, 0, F(4), {"a": F(16)}, cands)
    assert [c.key for c in got] == ["a/new", "a/old", "a/high"]


def test_reclaim_never_takes_from_a_queue_within_its_nominal() -> None:
    qs = two()
    b = qs.get("b")
    assert b is not None
    assert reclaimable(qs, b, 0, F(4), {"a": F(8), "b": F(4)}, [C("a/x", "a")]) == []


def test_reclaim_needs_the_reclaimer_to_stay_within_its_nominal() -> None:
    qs = two()
    b = qs.get("b")
    assert b is not None
    # b would go to 12 of its 8: that is borrowing, not reclaiming
    assert reclaimable(qs, b, 0, F(4), {"a": F(12), "b": F(8)}, [C("a/x", "a")]) == []


def test_reclaim_policies_never_and_lower_priority() -> None:
    used = {"a": F(16)}
    never = Quotas([Queue("a", F(8), cohort="r"),
                    Queue("b", F(8), cohort="r", reclaim=ReclaimWithinCohort.NEVER)])
    lower = Quotas([Queue("a", F(8), cohort="r"),
                    Queue("b", F(8), cohort="r", reclaim=ReclaimWithinCohort.LOWER_PRIORITY)])
    cands = [C("a/p0", "a", 0), C("a/p5", "a", 5)]
    assert reclaimable(never, never.queues["b"], 5, F(4), used, cands) == []
    assert [c.key for c in reclaimable(lower, lower.queues["b"], 5, F(4), used, cands)] == ["a/p0"]


def test_within_queue_lower_priority_preempts_only_lower_priority_of_its_own_queue() -> None:
    qs = Quotas([Queue("a", F(8), within=WithinQueue.LOWER_PRIORITY)])
    a = qs.get("a")
    assert a is not None
    cands = [C("a/p0", "a", 0), C("a/p9", "a", 9)]
    assert [c.key for c in reclaimable(qs, a, 5, F(4), {"a": F(8)}, cands)] == ["a/p0"]


def test_no_cycle_the_queue_reclaimed_from_cannot_reclaim_back() -> None:
    """b reclaims 8 from a (a borrowed 8); once done, a is at its nominal and b is
    within its own: a's waiting workloads find nothing to reclaim from b, whatever
    their priority and a's policy."""
    qs = two()
    a, b = qs.get("a"), qs.get("b")
    assert a is not None and b is not None
    a_work = [C(f"a/w{i}", "a", 0, f"t{i}") for i in range(4)]
    used = {"a": F(16)}
    victims = reclaimable(qs, b, 0, F(8), used, a_work)[:2]
    after = without(used, victims)
    after["b"] = F(8)
    assert qs.fits(b, F(0), after) and after["a"] == 8
    b_work = [C("b/x", "b", 0, "t8"), C("b/y", "b", 0, "t9")]
    assert reclaimable(qs, a, 1_000_000, F(4), after, b_work) == []
