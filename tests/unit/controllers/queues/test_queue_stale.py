"""A queue's decision made while holders changed elsewhere: its only read of the
other holders is its queue's quota, so it is booked when the quota still admits it
as the holders are now (``QueueBook.still_admits``), and made again only when it
does not (``decider.stale_reason``). Before, any holder anywhere sent it round
again: 20 of a 400-unit burst's decisions with one queue (bench/README.md, round 12).
"""

from __future__ import annotations

from internal.scheduling.framework import Decision
from tests.unit.controllers.placement.test_stale_decision import during_pass, retried
from tests.unit.controllers.queues.test_queue_gate import (
    WAITING_FOR_QUOTA,
    Cluster,
    child_pod,
    queue,
)


def elsewhere(c: Cluster, ns: str, name: str, gpus: int) -> None:
    """During the first pass: ``gpus`` devices of a node the decision does not book
    start being held by a pod of ``ns``."""
    def change(decision: Decision, _: int) -> None:
        node = next(n for n in ("node1", "node2", "node3", "node4")
                    if n not in {p.node for p in decision.placements})
        c.state.events.on_pod(child_pod(ns, name, node, list(range(gpus))))
    during_pass(c.state, change)


def test_a_holder_arriving_on_another_node_does_not_send_a_queues_decision_round() -> None:
    c = Cluster()
    elsewhere(c, "ns-b", "theirs", 2)
    before = retried()
    d = c.state.decide(c.submit("ns-a", "mine", gpus=4))
    assert d.ok and d.queue == "a"
    assert retried() == before  # booked as it was made; before: made again


def test_a_holder_that_fills_the_quota_meanwhile_still_sends_it_round() -> None:
    """The quota the decision was admitted under is gone when it is booked: it is
    made again, and waits for quota instead of going over it."""
    c = Cluster(queue("a", 4, "ns-a"))
    elsewhere(c, "ns-a", "first", 4)
    before = retried()
    d = c.state.decide(c.submit("ns-a", "second", gpus=4))
    assert retried() == before + 1
    assert not d.ok and d.wait_reason == WAITING_FOR_QUOTA, d.message
