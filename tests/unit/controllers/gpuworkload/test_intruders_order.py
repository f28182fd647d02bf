"""The evictor's verdict does not depend on the order of the pods' handlers: the
placement state's handler may apply a pod's event after the evictor's worker has
asked the ledger (the event gate defers it while a scheduling pass holds the
placement lock, controllers/placement/event_gate.py)."""

from __future__ import annotations

import time
from typing import Any

from controllers.gpuworkload.intruders import OVERCOMMIT_REASON, IntruderEvictor, over_commits
from internal.scheduling.holdings import Allocation
from tests.unit.controllers.fakes import FakeRecorder
from tests.unit.controllers.gpuworkload.test_intruders import Evictions, gpu_pod
from tests.waiting import eventually

OVER = "node1: over-committed: 8 GPUs held on its 4 devices (named 0,1,2,3 by team-a/w)"


class Ledger:
    """The ledger's over-commit verdicts, by pod UID: None while it has not booked
    the pod (its event not applied yet); counts the questions."""

    def __init__(self) -> None:
        self.verdicts: dict[str, str] = {}
        self.asked: list[str] = []

    def over_commits(self, pod: dict[str, Any]) -> str | None:
        self.asked.append(pod["metadata"]["name"])
        return self.verdicts.get(pod["metadata"]["uid"])


def test_an_over_commit_booked_after_the_worker_asked_is_evicted_without_another_event(
) -> None:
    """Before, the worker took "not booked yet" for "no over-commit" and dropped the
    pod: a pod forced beside our workload ran on shared GPUs until its next update
    (the kubelet's, once started, when a PodDisruptionBudget holds it) or the sweep,
    10 s later."""
    client, recorder, ledger = Evictions(), FakeRecorder(), Ledger()
    ev = IntruderEvictor(client, recorder, lambda _: False, lambda: True,
                         over_commits=ledger.over_commits)
    ev.on_pod(gpu_pod("late", gpus=4))  # its only event
    eventually(lambda: ledger.asked, timeout=5, what="the worker asked the ledger")
    ledger.verdicts["uid-late"] = OVER  # the placement state's handler, a moment later
    eventually(lambda: client.asked == [("team-a", "late")], timeout=5, what="evicted")
    assert [(n, r) for n, _, r, _ in recorder.events] == [("late", OVERCOMMIT_REASON)]
    ev.stop()


def test_a_pod_booked_without_an_over_commit_is_asked_once() -> None:
    client, ledger = Evictions(), Ledger()
    ledger.verdicts["uid-early"] = ""  # booked: its node has room
    ev = IntruderEvictor(client, FakeRecorder(), lambda _: False, lambda: True,
                         over_commits=ledger.over_commits)
    ev.on_pod(gpu_pod("early"))
    eventually(lambda: ledger.asked, timeout=5, what="asked")
    time.sleep(1.5)
    assert ledger.asked == ["early"] and client.asked == []
    ev.stop()


def test_a_pod_the_ledger_never_books_is_left_to_the_sweep() -> None:
    """Asked again a few times, then no more until its next event or the sweep."""
    from controllers.gpuworkload import intruders

    client, ledger = Evictions(), Ledger()
    ev = IntruderEvictor(client, FakeRecorder(), lambda _: False, lambda: True,
                         over_commits=ledger.over_commits)
    ev.on_pod(gpu_pod("never"))
    limit = intruders.RECHECKS * intruders.RECHECK_AFTER
    eventually(lambda: len(ledger.asked) == 1 + intruders.RECHECKS, timeout=limit + 5,
               what="asked again until the limit")
    time.sleep(2 * intruders.RECHECK_AFTER)
    assert len(ledger.asked) == 1 + intruders.RECHECKS
    ev.sweep([gpu_pod("never")])
    eventually(lambda: len(ledger.asked) > 1 + intruders.RECHECKS, timeout=5,
               what="the sweep asks again")
    ev.stop()


class State:
    """A placement state's ledger read of one pod (None: not booked)."""

    def __init__(self, held: Allocation | None) -> None:
        self.held = held

    def ledger_read(self, question: str) -> Any:
        assert question == "pod"
        return lambda uid: self.held


def test_the_ledger_read_tells_not_booked_from_no_over_commit() -> None:
    pod = gpu_pod("p")
    assert over_commits(None, pod) is None  # no state ready
    assert over_commits(State(None), pod) is None  # not booked yet
    assert over_commits(State(Allocation("pod:uid-p", (), holder=True)), pod) == ""
    assert over_commits(State(Allocation("pod:uid-p", (), holder=True, overcommit=OVER)),
                        pod) == OVER  # type: ignore[arg-type]
