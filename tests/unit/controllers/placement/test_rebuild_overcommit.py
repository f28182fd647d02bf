"""A rebuild finds the over-commits the events would find: the ledger knows its
nodes' devices before it books the pods (``Ledger.rebuild(into=...)``). Before, the
rebuild booked the pods first, with every node's size unknown, so no pod was found
over-committing after a manager's restart or a refill, and later updates kept that
verdict: an over-committing pod was never evicted."""

from __future__ import annotations

from tests.unit.controllers.placement.test_placement_state import World, pod


def forced_beside_ours() -> list[dict]:
    ours = pod("ours-0", "node1", devices="0,1,2,3")
    ours["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    forced = pod("forced", "node1", gpus=4)
    forced["metadata"]["creationTimestamp"] = "2026-01-01T00:00:05Z"
    return [ours, forced]


def test_an_over_commit_found_by_the_events_is_kept_by_a_refill() -> None:
    w = World()
    for p in forced_beside_ours():
        w.state.events.on_pod(p)
    assert w.state.ledger_read("pod")("uid-forced").overcommit  # the events' verdict
    w.state.invalidate("a handler raised")
    w.state.rebuild(lambda: (w_nodes(), [], [], forced_beside_ours()))
    assert w.state.ledger_read("pod")("uid-forced").overcommit, "lost by the refill"


def test_a_rebuild_finds_the_over_commit_of_the_later_pod() -> None:
    w = World(pods=forced_beside_ours())
    assert w.state.ledger_read("pod")("uid-forced").overcommit
    assert not w.state.ledger_read("pod")("uid-ours-0").overcommit


def w_nodes() -> list:
    from tests.unit.controllers.placement.test_placement_state import NODES
    return NODES
