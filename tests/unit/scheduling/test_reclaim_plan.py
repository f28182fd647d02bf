"""Reclaim plans (internal/scheduling/reclaim.py): which borrowers a queue under its
nominal evicts so that a workload both fits its quota and finds devices, and which
it leaves alone: nothing when it fits already, no queue taken below its nominal, no
victim that a later one made unneeded."""

from __future__ import annotations

from fractions import Fraction as F

from api.v1alpha1.types import Placement
from internal.scheduling.ledger import Ledger
from internal.scheduling.quota import Candidate, Queue, Quotas
from internal.scheduling.reclaim import plan_reclaim
from internal.scheduling.strategies import create
from tests.unit.scheduling.helpers import cluster, node, workload


def P(i: int, n: str, *d: int) -> Placement:
    return Placement(index=i, node=n, devices=list(d))


def C(key: str, queue: str, created: str, gpus: int = 2, priority: int = 0) -> Candidate:
    return Candidate(key, key, queue, priority, created, F(gpus))


def quotas(a: int, b: int) -> Quotas:
    return Quotas([Queue("a", F(a), cohort="c"), Queue("b", F(b), cohort="c")])


def book(led: Ledger, held: dict[str, list[Placement]]) -> None:
    for key, placements in held.items():
        led.assume(key, placements)


def plan(led_snap, qs: Quotas, need: int, used: dict[str, int], cands: list[Candidate],
         priority: int = 0):
    snap, led = led_snap
    w = workload("new", ns="x", gpusPerReplica=need, priority=priority)
    a = qs.get("a")
    assert a is not None
    return plan_reclaim(w, snap, led, create("leastLoaded"), False, qs, a, F(need),
                        {k: F(v) for k, v in used.items()}, cands)


def test_nothing_is_taken_when_the_workload_fits_its_quota_and_the_devices() -> None:
    snap, led = cluster(node("n1", 4))
    book(led, {"x/b1": [P(0, "n1", 0, 1)]})
    qs = quotas(4, 0)
    assert plan((snap, led), qs, 2, {"b": 2}, [C("x/b1", "b", "t1")]) is None


def test_the_newest_borrower_is_taken_and_the_workload_goes_on_its_devices() -> None:
    snap, led = cluster(node("n1", 4), node("n2", 4))
    book(led, {"x/a0": [P(0, "n1", 2, 3)], "x/b1": [P(0, "n1", 0, 1)],
               "x/b2": [P(0, "n2", 0, 1)], "x/b3": [P(0, "n2", 2, 3)]})
    cands = [C("x/b1", "b", "t1"), C("x/b2", "b", "t2"), C("x/b3", "b", "t3")]
    got = plan((snap, led), quotas(4, 4), 2, {"a": 2, "b": 6}, cands)
    assert got is not None
    victims, placements = got
    assert [v.key for v in victims] == ["x/b3"]
    assert placements == [P(0, "n2", 2, 3)]


def test_enough_borrowers_are_taken_for_the_quota_and_the_devices() -> None:
    # b borrows 4 over its nominal of 2; a needs 4 on one node, within its nominal 6
    snap, led = cluster(node("n1", 4), node("n2", 4))
    book(led, {"x/a0": [P(0, "n1", 2, 3)], "x/b1": [P(0, "n1", 0, 1)],
               "x/b2": [P(0, "n2", 0, 1)], "x/b3": [P(0, "n2", 2, 3)]})
    cands = [C("x/b1", "b", "t1"), C("x/b2", "b", "t2"), C("x/b3", "b", "t3")]
    got = plan((snap, led), quotas(6, 2), 4, {"a": 2, "b": 6}, cands)
    assert got is not None
    victims, placements = got
    assert sorted(v.key for v in victims) == ["x/b2", "x/b3"]
    assert placements == [P(0, "n2", 0, 1, 2, 3)]


def test_a_borrowing_queue_is_not_taken_below_its_nominal_even_for_devices() -> None:
    # b borrows 2 (6 of 4): taking its newest, split over both nodes, frees no node
    # enough for a 2-GPU replica; b's next workload would take b below its nominal
    snap, led = cluster(node("n1", 4), node("n2", 4))
    book(led, {"x/a0": [P(0, "n1", 3), P(1, "n2", 3)], "x/b1": [P(0, "n1", 0, 1)],
               "x/b2": [P(0, "n2", 0, 1)], "x/b3": [P(0, "n1", 2), P(1, "n2", 2)]})
    cands = [C("x/b1", "b", "t1"), C("x/b2", "b", "t2"), C("x/b3", "b", "t3")]
    assert plan((snap, led), quotas(4, 4), 2, {"a": 2, "b": 6}, cands) is None


def test_a_victim_a_later_one_made_unneeded_is_given_back() -> None:
    # b borrows 4 (6 of 2). Its newest (b3, split) brings a within quota but frees no
    # node; b2 frees n2, and then b3 is not needed any more
    snap, led = cluster(node("n1", 4), node("n2", 4))
    book(led, {"x/a0": [P(0, "n1", 3), P(1, "n2", 3)], "x/b1": [P(0, "n1", 0, 1)],
               "x/b2": [P(0, "n2", 0, 1)], "x/b3": [P(0, "n1", 2), P(1, "n2", 2)]})
    cands = [C("x/b1", "b", "t1"), C("x/b2", "b", "t2"), C("x/b3", "b", "t3")]
    got = plan((snap, led), quotas(6, 2), 2, {"a": 2, "b": 6}, cands)
    assert got is not None
    victims, placements = got
    assert [v.key for v in victims] == ["x/b2"]
    assert placements == [P(0, "n2", 0, 1)]

