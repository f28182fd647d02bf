"""The backstop reconciles unsettled workloads nobody looked at, and counts the
reconciles that were owed (a lost requeue)."""

from __future__ import annotations

from datetime import timedelta

from controllers.gpuworkload.backstop import Backstop
from internal.metrics.domain import BACKSTOP_RECONCILES
from tests.unit.controllers.fakes import NS, Env


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def wl(name: str, phase: str | None = None, deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": NS}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase} if phase else {}}


def acted() -> float:
    return BACKSTOP_RECONCILES.labels("acted")._value.get()


def test_a_sweep_enqueues_unsettled_workloads_nobody_reconciled_for_a_period() -> None:
    clock = Clock()
    objs = [wl("new"), wl("placing", "Scheduled"), wl("running", "Running"),
            wl("done", "Succeeded"), wl("going", "Running", deleting=True)]
    queued: list[str] = []
    b = Backstop(lambda: objs, queued.append, period=60, clock=clock)
    assert b.sweep() == []  # first seen: a period from now
    clock.t += 30
    b.reconciled(f"{NS}/placing", acted=False)
    clock.t += 30
    assert sorted(b.sweep()) == [f"{NS}/going", f"{NS}/new"]
    assert b.sweep() == []  # marked: not again until a reconcile took it
    clock.t += 30
    assert b.sweep() == [f"{NS}/placing"]
    assert sorted(queued) == [f"{NS}/going", f"{NS}/new", f"{NS}/placing"]


def test_a_lost_retry_timer_is_made_up_for_and_counted() -> None:
    env = Env()
    clock = Clock()
    queued: list[str] = []
    env.rec.backstop = Backstop(env.workloads.list, queued.append, period=60, clock=clock)
    env.workload("big", gpusPerReplica=8,
                 retryPolicy={"maxRetries": 5, "backoffSeconds": 10, "maxBackoffSeconds": 10})
    result = env.reconcile("big")
    assert env.status("big")["retries"] == 0 and result is not None
    # the requeue the reconcile asked for is lost; time passes
    env.now += timedelta(seconds=20)
    clock.t += 61
    before = acted()
    assert env.rec.backstop.sweep() == [f"{NS}/big"]
    env.reconcile("big")
    assert env.status("big")["retries"] == 1  # the retry was owed
    assert acted() == before + 1


def test_a_reconcile_that_changes_nothing_is_idle() -> None:
    env = Env()
    clock = Clock()
    env.rec.backstop = Backstop(env.workloads.list, lambda key: None, period=60, clock=clock)
    env.workload("big", gpusPerReplica=8,
                 retryPolicy={"maxRetries": 5, "backoffSeconds": 600})
    env.reconcile("big")
    clock.t += 61
    idle = BACKSTOP_RECONCILES.labels("idle")._value.get()
    before = acted()
    assert env.rec.backstop.sweep() == [f"{NS}/big"]
    env.reconcile("big")  # its retry is not due: nothing to do
    assert acted() == before
    assert BACKSTOP_RECONCILES.labels("idle")._value.get() == idle + 1
