"""The cohort's fair share at its edges (internal/scheduling/admission.py): an equal
share holds nobody, of several fairer queues the one whose waiting workload is
first in the order is named, and a reclaim plans from the use left once every
preemption under way is done."""

from __future__ import annotations

from fractions import Fraction as F

from internal.scheduling.admission import Line, Waiting, queued_behind, settled
from internal.scheduling.ledger import Allocation
from internal.scheduling.queue_usage import OwnerUse
from internal.scheduling.quota import Queue, Quotas


def q(name: str, nominal: int) -> Queue:
    return Queue(name=name, nominal=F(nominal), cohort="c")


def line(key: str, w: Waiting) -> Line:
    return [(w.order(key), w)]


def test_a_queue_with_an_equal_fair_share_holds_no_borrower() -> None:
    a, b = q("a", 4), q("b", 4)
    # a would borrow 1 (3 + 2 of 4) but borrows nothing yet: its share is 0, as b's
    lines = {"b": line("ns-b/w", Waiting("b", 0, "t0", F(1)))}
    me = Waiting("a", 0, "t1", F(2))
    assert queued_behind("ns-a/me", me, a, Quotas([a, b]), {"a": F(3)}, lines) is None


def test_of_two_fairer_queues_the_older_waiting_workload_is_named() -> None:
    a, b, d = q("a", 4), q("b", 4), q("d", 4)
    used = {"a": F(6), "b": F(0), "d": F(0)}
    lines = {"b": line("ns-b/older", Waiting("b", 0, "t1", F(1))),
             "d": line("ns-d/newer", Waiting("d", 0, "t2", F(1)))}
    me = Waiting("a", 0, "t3", F(1))
    assert queued_behind("ns-a/me", me, a, Quotas([a, b, d]), used, lines) == (
        "waiting for ns-b/older of queue b: queue a borrows more for its weight "
        "(fair share 2.00)")


def test_every_victim_under_way_is_taken_off_whatever_order_they_come_in() -> None:
    def holder(key: str, owner: str, pod: bool) -> Allocation:
        return Allocation(key=key, placements=(), owner=owner, holder=pod)

    owners = {f"v{i}": OwnerUse(F(1), holder(f"ns-a/v{i}-pod", f"v{i}", True))
              for i in range(20)}
    owners["again"] = OwnerUse(F(2), holder("ns-a/again", "again", False))  # booked again
    out = settled({"a": F(30)}, owners, list(owners), lambda a: "a")
    assert out == {"a": F(10)}


def test_waiting_ones_refused_for_quota_stall_nobody_however_many() -> None:
    a = Queue(name="a", nominal=F(8))
    lines = {"a": [(w.order(k), w) for k, w in sorted(
        {"ns/big1": Waiting("a", 0, "t1", F(8)), "ns/big2": Waiting("a", 0, "t2", F(9)),
         "ns/big3": Waiting("a", 0, "t3", F(8))}.items())]}
    me = Waiting("a", 0, "t4", F(1))
    assert queued_behind("ns/me", me, a, Quotas([a]), {"a": F(4)}, lines) is None
