"""The admission rules at their edges (internal/scheduling/admission.py): a long
line of waiting workloads costs the gate one quota sum per queue and need, a
workload whose queue changed is never held by its own place in its former queue's
line, and a preemption's victims are listed with what the gate holds of them."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction as F

from controllers.queues.manager import QueueManager
from internal.scheduling.admission import Line, Waiting, preempted, queued_behind
from internal.scheduling.framework import PREEMPT, Decision
from internal.scheduling.ledger import Allocation
from internal.scheduling.queue_usage import OwnerUse
from internal.scheduling.quota import Candidate, Queue, Quotas


class AskedQuotas(Quotas):
    """The quota arithmetic, recording each question the gate asks of it."""

    def __init__(self, queues: list[Queue]) -> None:
        super().__init__(queues)
        self.asked: list[tuple[str, F]] = []

    def fits(self, q: Queue, need: F, used: Mapping[str, F]) -> bool:
        self.asked.append((q.name, need))
        return super().fits(q, need, used)


def _line(queue: str, needs: list[int]) -> Line:
    entries = ((f"ns/w{i:04}", Waiting(queue, 0, f"t{i:04}", F(n)))
               for i, n in enumerate(needs))
    return sorted((w.order(k), w) for k, w in entries)


def test_a_long_line_refused_for_quota_costs_one_quota_sum_per_need() -> None:
    """1,000 workloads waiting for 8 GPUs of a queue with 4 free: each decision
    under the placement lock asks the quota once for them all, not 1,000 times
    (bench.queue_gate: 43 ms a decision before, 0.35-0.41 ms since)."""
    a = Queue(name="a", nominal=F(8))
    quotas = AskedQuotas([a])
    lines = {"a": _line("a", [8] * 1000)}
    me = Waiting("a", 0, "t9999", F(1))
    assert queued_behind("ns/me", me, a, quotas, {"a": F(4)}, lines) is None
    assert quotas.asked == [("a", F(8))]


def test_a_larger_need_behind_a_refused_one_is_not_asked_again() -> None:
    a = Queue(name="a", nominal=F(8))
    quotas = AskedQuotas([a])
    lines = {"a": _line("a", [6, 9, 6, 12, 5, 7, 3])}
    me = Waiting("a", 0, "t9999", F(1))
    # 4 used: 6 does not fit, nor 9, 6, 12 (never asked); 5 does not either; 3 does
    assert queued_behind("ns/me", me, a, quotas, {"a": F(4)}, lines) == (
        "waiting behind ns/w0006 in queue a (priority, then creation time)")
    assert quotas.asked == [("a", F(6)), ("a", F(5)), ("a", F(3))]


def test_a_borrower_asks_each_fairer_queue_once_per_need() -> None:
    a, b = (Queue(name=n, nominal=F(4), cohort="c", borrowing_limit=F(2)) for n in "ab")
    quotas = AskedQuotas([a, b])
    used = {"a": F(6), "b": F(3)}  # a borrows 2; b borrows none and may use 6
    lines = {"b": _line("b", [4] * 500)}
    me = Waiting("a", 0, "t9999", F(1))
    assert queued_behind("ns/me", me, a, quotas, used, lines) is None
    assert quotas.asked == [("b", F(4))]


def _workload(queue: str, name: str = "me", created: str = "t1") -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "creationTimestamp": created},
            "spec": {"queueName": queue}, "status": {"phase": "Pending"}}


def test_a_workload_moved_to_another_queue_never_waits_for_itself() -> None:
    """Refused for quota in queue b, its spec.queueName changed to a: its old place
    stays in b's line until the gate decides it again. Borrowing in a, it waits for
    b's (fairer) waiting ones, never for its own old place."""
    a, b = Queue(name="a", nominal=F(4), cohort="c"), Queue(name="b", nominal=F(4), cohort="c")
    quotas = Quotas([a, b])
    used = {"a": F(6), "b": F(0)}  # a borrows 2 of b's 4
    manager = QueueManager()
    manager.workload_changed(_workload("b"))
    manager.wait("ns/me", Waiting("b", 0, "t1", F(1)))
    manager.workload_changed(_workload("a"))  # moved: still Pending, still in b's line
    assert manager.line("b") == ["ns/me"]
    me = Waiting("a", 0, "t1", F(1))
    assert manager.ahead("ns/me", me, a, quotas, used) is None

    manager.workload_changed(_workload("b", name="other", created="t2"))
    manager.wait("ns/other", Waiting("b", 0, "t2", F(1)))
    assert manager.line("b") == ["ns/me", "ns/other"]
    assert manager.ahead("ns/me", me, a, quotas, used) == (
        "waiting for ns/other of queue b: queue a borrows more for its weight "
        "(fair share 2.00)")


def test_a_preemptions_victims_are_listed_with_their_owner_priority_and_gpus() -> None:
    """What the gate holds a priority preemption to: each victim by key, owner,
    queue, priority and GPUs; their creation time is not known here."""
    allocs = {"ns-a/low": Allocation(key="ns-a/low", placements=(), owner="o1", priority=1),
              "ns-a/mid": Allocation(key="ns-a/mid", placements=(), owner="o2", priority=3)}
    owners = {o: OwnerUse(F(g), allocs[k]) for o, k, g in
              (("o1", "ns-a/low", 4), ("o2", "ns-a/mid", F(1, 2)))}
    d = Decision(PREEMPT, "priority", victims=["ns-a/mid", "ns-a/low"])
    d.queue = "a"
    assert preempted(d, allocs.get, owners) == [
        Candidate("ns-a/mid", "o2", "a", 3, "", F(1, 2)),
        Candidate("ns-a/low", "o1", "a", 1, "", F(4))]
    # outside any queue: held against none
    outside = Decision(PREEMPT, "priority", victims=["ns-a/low"])
    assert [v.queue for v in preempted(outside, allocs.get, owners)] == [""]
