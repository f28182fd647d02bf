"""Reclaim plans (internal/scheduling/reclaim.py): which borrowers a queue under its
nominal evicts so that a workload both fits its quota and finds devices, and which
it leaves alone: nothing when it fits already, no queue taken below its nominal, no
victim that a later one made unneeded."""

from __future__ import annotations

from fractions import Fraction as F

from api.v1alpha1.queues import ReclaimWithinCohort
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


def quotas(a: int, b: int, *more: Queue, **spec: object) -> Quotas:
    return Quotas([Queue("a", F(a), cohort="c", **spec),  # type: ignore[arg-type]
                   Queue("b", F(b), cohort="c"), *more])


def book(led: Ledger, held: dict[str, list[Placement]]) -> None:
    for key, placements in held.items():
        led.assume(key, placements)


def plan(led_snap, qs: Quotas, need: int, used: dict[str, int], cands: list[Candidate],
         priority: int = 0, strategy: str = "leastLoaded", counted: bool = False):
    snap, led = led_snap
    w = workload("new", ns="x", gpusPerReplica=need, priority=priority)
    a = qs.get("a")
    assert a is not None
    return plan_reclaim(w, snap, led, create(strategy), counted, qs, a, F(need),
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



def test_nothing_is_planned_with_nobody_to_take() -> None:
    snap, led = cluster(node("n1", 4))
    book(led, {"x/b1": [P(0, "n1", 0, 1, 2, 3)]})
    assert plan((snap, led), quotas(4, 0), 2, {"b": 4}, []) is None


def test_a_queue_within_its_quota_takes_back_the_devices_a_borrower_holds() -> None:
    # a fits its quota (the pool has 2 left), but no node has 2 free GPUs: b's
    # newest workload, split over both nodes, gives n1 back
    snap, led = cluster(node("n1", 4), node("n2", 4))
    book(led, {"x/b1": [P(0, "n1", 0, 1)], "x/b2": [P(0, "n2", 0, 1)],
               "x/b3": [P(0, "n1", 2), P(1, "n2", 2)]})
    cands = [C("x/b1", "b", "t1"), C("x/b2", "b", "t2"), C("x/b3", "b", "t3")]
    got = plan((snap, led), quotas(4, 4), 2, {"b": 6}, cands)
    assert got is not None
    victims, placements = got
    assert [v.key for v in victims] == ["x/b3"]
    assert len(placements) == 1 and 2 in placements[0].devices


def test_reclaim_lower_priority_takes_only_lower_priority_borrowers() -> None:
    snap, led = cluster(node("n1", 4))
    book(led, {"x/a0": [P(0, "n1", 0, 1)], "x/hi": [P(0, "n1", 2)], "x/lo": [P(0, "n1", 3)]})
    cands = [C("x/hi", "b", "t2", 1, priority=9), C("x/lo", "b", "t1", 1, priority=1)]
    qs = quotas(3, 1, reclaim=ReclaimWithinCohort.LOWER_PRIORITY)
    got = plan((snap, led), qs, 1, {"a": 2, "b": 2}, cands, priority=5)
    assert got is not None
    assert [v.key for v in got[0]] == ["x/lo"] and got[1] == [P(0, "n1", 3)]


def test_a_queue_back_at_its_nominal_is_passed_over_for_one_still_borrowing() -> None:
    # b borrows 2, d borrows 2. b's newest (split) brings the quota within reach but
    # frees no node; b's next would take b below its nominal, so d's is taken, and
    # then b's is not needed any more
    snap, led = cluster(node("n1", 4), node("n2", 4))
    book(led, {"x/b2": [P(0, "n1", 0, 1)], "x/b3": [P(0, "n1", 2), P(1, "n2", 0)],
               "x/d1": [P(0, "n2", 1, 2)], "x/e1": [P(0, "n1", 3), P(1, "n2", 3)]})
    cands = [C("x/b2", "b", "t2"), C("x/b3", "b", "t3"), C("x/d1", "d", "t1")]
    qs = quotas(4, 2, Queue("d", F(0), cohort="c"), Queue("e", F(2), cohort="c"))
    got = plan((snap, led), qs, 2, {"b": 4, "d": 2, "e": 2}, cands)
    assert got is not None
    victims, placements = got
    assert [v.key for v in victims] == ["x/d1"]
    assert placements == [P(0, "n2", 1, 2)]


def test_a_victim_needed_for_the_quota_is_kept_though_another_frees_the_devices() -> None:
    # y (newest) alone leaves a over the pool; x frees n1 and, taken alone, brings a
    # within it: x is kept, y given back
    snap, led = cluster(node("n1", 2), node("n2", 2))
    book(led, {"x/x": [P(0, "n1", 0, 1)], "x/y": [P(0, "n2", 0)], "x/e": [P(0, "n2", 1)]})
    cands = [C("x/x", "b", "t1", 2), C("x/y", "b", "t2", 1)]
    qs = quotas(2, 1, Queue("e", F(1), cohort="c"))
    got = plan((snap, led), qs, 2, {"b": 3, "e": 1}, cands)
    assert got is not None
    victims, placements = got
    assert [v.key for v in victims] == ["x/x"]
    assert placements == [P(0, "n1", 0, 1)]


def test_in_device_plugin_mode_the_plan_counts_gpus_on_the_node() -> None:
    snap, led = cluster(node("n1", 4))
    led.assume("x/b1", [P(0, "n1")], gpus_per_replica=2)
    led.assume("x/b2", [P(0, "n1")], gpus_per_replica=2)
    cands = [C("x/b1", "b", "t1"), C("x/b2", "b", "t2")]
    got = plan((snap, led), quotas(2, 2), 2, {"b": 4}, cands, counted=True)
    assert got is not None
    assert [v.key for v in got[0]] == ["x/b2"] and got[1] == [P(0, "n1")]


def test_a_random_strategys_plan_is_the_same_every_time() -> None:
    # the quota, not the devices, is short: the workload may go on any of 32 GPUs
    snap, led = cluster(*(node(f"n{i}", 4) for i in range(8)), node("m", 1))
    book(led, {"x/b1": [P(0, "m", 0)]})
    qs = quotas(2, 0)
    plans = [plan((snap, led), qs, 1, {"a": 1, "b": 1}, [C("x/b1", "b", "t1", 1)],
                  strategy="random") for _ in range(5)]
    assert plans[0] is not None and [v.key for v in plans[0][0]] == ["x/b1"]
    assert all(p == plans[0] for p in plans)


def test_a_victim_the_quota_needs_is_kept_though_the_devices_need_another() -> None:
    # a needs 2 replicas of 1 GPU: y (newest, 1 GPU) is not enough for the quota,
    # x (2 GPUs) is, and x's devices alone place it: y goes back, x stays
    snap, led = cluster(node("n1", 2), node("n2", 2), node("n3", 1))
    book(led, {"x/x": [P(0, "n1", 0, 1)], "x/y": [P(0, "n2", 0)], "x/e": [P(0, "n3", 0)]})
    cands = [C("x/x", "b", "t1", 2), C("x/y", "b", "t2", 1)]
    qs = quotas(2, 1, Queue("e", F(1), cohort="c"))
    w = workload("new", ns="x", gpusPerReplica=1, replicas=2)
    a = qs.get("a")
    assert a is not None
    got = plan_reclaim(w, snap, led, create("leastLoaded"), False, qs, a, F(2),
                       {"b": F(3), "e": F(1)}, cands)
    assert got is not None
    assert [v.key for v in got[0]] == ["x/x"]


def test_of_two_sufficient_victim_sets_the_one_sparing_the_higher_priority_is_kept() -> None:
    # v3 (split over both nodes) is needed either way; with v1 it frees n1, with v2
    # n2: v2 (priority 2) is spared rather than v1 (priority 1)
    snap, led = cluster(node("n1", 2), node("n2", 2))
    book(led, {"x/v1": [P(0, "n1", 0)], "x/v2": [P(0, "n2", 0)],
               "x/v3": [P(0, "n1", 1), P(1, "n2", 1)]})
    cands = [C("x/v1", "b", "t1", 1, priority=1), C("x/v2", "b", "t2", 1, priority=2),
             C("x/v3", "b", "t3", 2, priority=3)]
    got = plan((snap, led), quotas(4, 0), 2, {"b": 4}, cands, priority=10)
    assert got is not None
    victims, placements = got
    assert sorted(v.key for v in victims) == ["x/v1", "x/v3"]
    assert placements == [P(0, "n1", 0, 1)]


def test_a_gang_of_parts_reclaims_what_its_own_shapes_need() -> None:
    """A gang of 1 x 4 GPUs then 2 x 1 GPU (a pod group whose members ask different
    things, internal/scheduling/gangparts.py): the 4-GPU part takes a whole node,
    the 1-GPU parts two devices of another, so one of the three borrowers is kept."""
    snap, led = cluster(node("n1", 4), node("n2", 4))
    book(led, {"x/b1": [P(0, "n1", 0, 1, 2, 3)], "x/b2": [P(0, "n2", 0, 1)],
               "x/b3": [P(0, "n2", 2, 3)]})
    cands = [C("x/b1", "b", "t1", gpus=4), C("x/b2", "b", "t2"), C("x/b3", "b", "t3")]
    qs = quotas(8, 0)
    a = qs.get("a")
    assert a is not None
    big = workload("new", ns="x", gpusPerReplica=4)
    small = workload("new", ns="x", gpusPerReplica=1, replicas=2)
    got = plan_reclaim(big, snap, led, create("leastLoaded"), False, qs, a, F(6),
                       {"b": F(8)}, cands, [small])
    assert got is not None
    victims, placements = got
    assert sorted(v.key for v in victims) == ["x/b1", "x/b3"]
    assert placements == [P(0, "n1", 0, 1, 2, 3), P(1, "n2", 2), P(2, "n2", 3)]
