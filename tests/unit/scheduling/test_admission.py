"""The queue admission rules without a server or a cache
(internal/scheduling/admission.py): who goes first within a queue and across a
cohort, what a preemption is held to, what a reclaim plans from."""

from __future__ import annotations

from fractions import Fraction

from internal.scheduling.admission import (
    Line,
    Waiting,
    preempted,
    queued_behind,
    quota_refusal,
    settled,
)
from internal.scheduling.framework import PREEMPT, UNSCHEDULABLE, Decision
from internal.scheduling.ledger import Allocation
from internal.scheduling.queue_usage import OwnerUse
from internal.scheduling.quota import Queue, Quotas

F = Fraction


def q(name: str, nominal: int, cohort: str | None = "c", weight: int = 1) -> Queue:
    return Queue(name=name, nominal=F(nominal), cohort=cohort, weight=weight)


def line(*entries: tuple[str, Waiting]) -> Line:
    return sorted((w.order(k), w) for k, w in entries)


def test_within_a_queue_the_first_waiting_one_that_fits_goes_first() -> None:
    a = q("a", 8)
    quotas = Quotas([a])
    used = {"a": F(4)}
    lines = {"a": line(("ns/big", Waiting("a", 5, "t0", F(8))),  # does not fit: stalls nobody
                       ("ns/old", Waiting("a", 0, "t1", F(4))),
                       ("ns/young", Waiting("a", 0, "t3", F(4))))}
    me = Waiting("a", 0, "t2", F(4))
    assert queued_behind("ns/me", me, a, quotas, used, lines) == (
        "waiting behind ns/old in queue a (priority, then creation time)")
    # one behind it never holds it, nor its own earlier place
    first = Waiting("a", 0, "t0", F(4))
    assert queued_behind("ns/old", first, a, quotas, used, lines) is None
    assert queued_behind("ns/x", Waiting("a", 9, "t9", F(4)), a, quotas, used, lines) is None


def test_a_tie_of_priority_and_time_goes_by_key() -> None:
    a = q("a", 8)
    lines = {"a": line(("ns/b", Waiting("a", 0, "t", F(1))))}
    assert queued_behind("ns/a", Waiting("a", 0, "t", F(1)), a, Quotas([a]), {}, lines) is None
    assert queued_behind("ns/c", Waiting("a", 0, "t", F(1)), a, Quotas([a]), {}, lines) \
        is not None


def test_a_borrower_waits_for_a_fairer_queue_of_its_cohort_only() -> None:
    a, b, c, lone = q("a", 4), q("b", 4), q("c", 8), q("lone", 4, cohort="other")
    quotas = Quotas([a, b, c, lone])
    used = {"a": F(8), "b": F(4), "c": F(0)}  # a borrows 4; b and c none
    lines = {"b": line(("ns-b/w", Waiting("b", 0, "t5", F(4)))),
             "lone": line(("ns-l/w", Waiting("lone", 0, "t0", F(1))))}
    me = Waiting("a", 0, "t1", F(4))
    assert queued_behind("ns-a/w", me, a, quotas, used, lines) == (
        "waiting for ns-b/w of queue b: queue a borrows more for its weight (fair share 4.00)")
    # not borrowing: the fair share does not hold it
    assert queued_behind("ns-a/w", me, a, quotas, {"a": F(0)}, lines) is None
    # a fairer queue's workload that does not fit holds nobody
    big = {"b": line(("ns-b/w", Waiting("b", 0, "t5", F(40))))}
    assert queued_behind("ns-a/w", me, a, quotas, used, big) is None


def test_the_message_names_whichever_comes_first_in_the_order() -> None:
    a, b = q("a", 4), q("b", 4)
    quotas = Quotas([a, b])
    used = {"a": F(6), "b": F(0)}
    same = ("ns-a/older", Waiting("a", 0, "t2", F(1)))
    other = ("ns-b/oldest", Waiting("b", 0, "t1", F(1)))
    me = Waiting("a", 0, "t3", F(1))
    lines = {"a": line(same), "b": line(other)}
    assert "ns-b/oldest of queue b" in queued_behind("ns-a/me", me, a, quotas, used, lines)
    lines = {"a": line(same), "b": line(("ns-b/later", Waiting("b", 0, "t2x", F(1))))}
    assert "behind ns-a/older in queue a" in queued_behind("ns-a/me", me, a, quotas, used,
                                                           lines)


def _alloc(key: str, owner: str, holder: bool = False) -> Allocation:
    return Allocation(key=key, placements=(), owner=owner, holder=holder)


def test_settled_takes_off_what_preemptions_under_way_take_once() -> None:
    owners = {"v1": OwnerUse(F(4), _alloc("ns-a/v1-pod", "v1", holder=True)),
              "v2": OwnerUse(F(2), _alloc("ns-a/v2", "v2")),  # booked again: counts
              "x": OwnerUse(F(1), _alloc("ns-x/p", "x", holder=True))}

    def queue_of(a: Allocation) -> str | None:
        return "a" if a.key.startswith("ns-a/") else None

    out = settled({"a": F(10)}, owners, ["v1", "v2", "v1", "x", "unknown"], queue_of)
    assert out == {"a": F(6)}


def test_a_preemption_is_held_to_the_quota_as_it_will_be_once_its_victims_go() -> None:
    a = q("a", 8, cohort=None)
    quotas = Quotas([a])
    owners = {"o": OwnerUse(F(4), _alloc("ns-a/low", "o"))}
    d = Decision(PREEMPT, "priority", victims=["ns-a/low", "ns-a/none"])
    d.queue = "a"
    victims = preempted(d, {"ns-a/low": _alloc("ns-a/low", "o")}.get, owners)
    assert [(v.key, v.queue, v.gpus) for v in victims] == [("ns-a/low", "a", F(4))]
    used = {"a": F(8)}
    assert quota_refusal(quotas, a, F(4), used, True, lambda: used, victims) is None
    assert quota_refusal(quotas, a, F(4), used, False, lambda: used, victims) is not None
    assert preempted(Decision(UNSCHEDULABLE, "priority"), {}.get, owners) == []


def test_its_own_earlier_place_never_holds_a_workload() -> None:
    """Refused before at a higher priority (its spec changed since), it does not
    wait behind itself."""
    a = q("a", 8)
    lines = {"a": line(("ns/me", Waiting("a", 5, "t1", F(4))))}
    now = Waiting("a", 0, "t1", F(4))
    assert queued_behind("ns/me", now, a, Quotas([a]), {"a": F(0)}, lines) is None


def test_a_queue_borrowing_as_much_for_its_weight_is_not_fairer() -> None:
    a, b = q("a", 4), q("b", 8, weight=2)
    quotas = Quotas([a, b, q("lender", 20)])
    used = {"a": F(6), "b": F(12)}  # 2 borrowed / 1 and 4 borrowed / 2
    lines = {"b": line(("ns-b/w", Waiting("b", 0, "t0", F(1))))}
    me = Waiting("a", 0, "t1", F(1))
    assert queued_behind("ns-a/w", me, a, quotas, used, lines) is None
    used["b"] = F(11)  # 3 / 2 < 2
    assert queued_behind("ns-a/w", me, a, quotas, used, lines) is not None
