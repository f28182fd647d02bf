"""The scheduling pass runs outside the placement lock and its booking is checked:
a decision whose nodes changed while it was made (a pod arrived on its devices, the
cache was filled again) is made again on the new state instead of being refused,
the last try is made under the lock, and a decision that books nothing takes no
lock at all (controllers/placement/decider.py ``Decider.decide``, internal/scheduling/stamps.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controllers.placement.decider import STALE_TRIES
from controllers.placement.state import PlacementState
from internal.metrics.domain import STALE_DECISIONS
from internal.scheduling.framework import Decision
from tests.unit.controllers.placement.test_placement_state import (
    NODES,
    CountingLock,
    World,
    gw,
    pod,
)


def during_pass(state: PlacementState, change: Callable[[Decision, int], None],
                times: int = 1) -> list[Decision]:
    """Makes the first ``times`` scheduling passes of ``state`` call ``change`` with
    the decision they reached (and the pass's number), as an informer's event would
    arrive between the pass and its booking; returns the passes' decisions."""
    made: list[Decision] = []
    schedule = state.scheduler.schedule

    def racing(*args: Any, **kw: Any) -> Decision:
        decision = schedule(*args, **kw)
        made.append(decision)
        if len(made) <= times:
            change(decision, len(made))
        return decision
    state.scheduler.schedule = racing  # type: ignore[method-assign]
    return made


def taken(decision: Decision) -> tuple[str, list[int]]:
    p = decision.placements[0]
    return p.node, list(p.devices)


def retried() -> float:
    return STALE_DECISIONS.labels("retried")._value.get()


def locked() -> float:
    return STALE_DECISIONS.labels("locked")._value.get()


def test_a_pod_arriving_on_the_chosen_devices_sends_the_decision_back_not_away() -> None:
    """Before, the pass and the booking were one locked section; with the pass
    outside it, the devices it chose may be taken meanwhile: the workload is placed
    on others, not told it is Unschedulable."""
    w = World()

    def theirs_arrive(d: Decision, n: int) -> None:
        node, devices = taken(d)
        w.state.events.on_pod(pod("theirs", node, devices=",".join(map(str, devices))))
    made = during_pass(w.state, theirs_arrive)
    before = retried()
    decision = w.state.decide(gw("mine", gpusPerReplica=4))
    assert decision.ok, decision.message
    assert len(made) == 2 and taken(decision) != taken(made[0])
    assert retried() == before + 1
    assert w.state.view().allocation("ns/mine") is not None


def test_a_refill_during_the_pass_sends_the_decision_back() -> None:
    """The cache filled again from the caches (a lost event) while a decision was
    made: it is made again on the new ledger, which knows a pod the old one did not."""
    w = World()

    def refill(d: Decision, n: int) -> None:
        node, devices = taken(d)
        busy = pod("busy", node, devices=",".join(map(str, devices)))
        w.state.rebuild(lambda: (NODES, [], [], [busy]))  # a new scheduler, unwrapped
    made = during_pass(w.state, refill)
    decision = w.state.decide(gw("mine", gpusPerReplica=4))
    assert decision.ok, decision.message
    assert taken(decision) != taken(made[0])
    assert w.state.view().allocation("ns/mine") is not None


def test_inputs_changing_on_every_pass_end_in_a_decision_under_the_lock() -> None:
    w = World()

    def churn(d: Decision, n: int) -> None:  # a node event each time
        w.state.events.on_pod(pod(f"theirs-{n}", "node2", devices=str(n - 1)))
        w.state.events.on_pod(pod(f"mine-{n}", "node1", devices=str(n - 1)))
    made = during_pass(w.state, churn, times=STALE_TRIES)
    before = locked()
    decision = w.state.decide(gw("mine", gpusPerReplica=1))
    assert decision.ok, decision.message
    assert len(made) == STALE_TRIES + 1 and locked() == before + 1
    node, devices = taken(decision)
    assert len(w.state.view().device_owners(node, devices[0])) == 1  # only its own


def test_a_decision_that_books_nothing_takes_no_lock() -> None:
    w = World()
    counting = CountingLock(w.state._lock)
    w.state._lock = counting  # type: ignore[assignment]
    assert not w.state.decide(gw("too-big", gpusPerReplica=8)).ok
    assert counting.sections == 0
    assert w.state.decide(gw("fits", gpusPerReplica=2)).ok
    assert counting.sections == 1  # the booking
