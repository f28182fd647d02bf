"""The backstop reconciles unsettled workloads nobody looked at, and counts the
reconciles that were owed (a lost requeue)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from controllers.gpuworkload.backstop import Backstop
from controllers.status.writer import StatusWriter
from internal.metrics.domain import BACKSTOP_RECONCILES
from tests.unit.controllers.fakes import NS, Env, invalid
from tests.unit.controllers.status.test_settled_wait import StatusClient


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


class RefusingStatus(StatusClient):
    """Refuses every status write: the status fails a validation policy (422)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.sent = 0

    def patch(self, api_version: str, kind: str, name: str, body: Any, **kw: Any) -> Any:
        if kw.get("subresource") == "status":
            self.sent += 1
            raise invalid(f'gpuworkloads.gpu.orchestrator.dev "{name}" is forbidden: '
                          "ValidatingAdmissionPolicy 'freeze' denied request")
        return super().patch(api_version, kind, name, body, **kw)


def test_a_status_written_again_after_a_refusal_is_no_lost_requeue() -> None:
    """A status the API server refused for good is given up on, and the reconcile
    the backstop then starts writes it again: that reconcile was owed to the
    refusal (the StatusRefused Event says so), not to a lost requeue, and the
    GPUOrchestratorLostRequeue alert must not fire for it."""
    env = Env()
    clock = Clock()
    client = RefusingStatus(env.client)
    writer = StatusWriter(client, env.workloads, own_writes=env.own_writes,
                          recorder=env.recorder)
    env.rec = env.new_reconciler(status_writer=writer, backstop=Backstop(
        env.workloads.list, lambda key: None, period=60, clock=clock))
    env.workload("big", gpusPerReplica=8,
                 retryPolicy={"maxRetries": 5, "backoffSeconds": 600})
    writer.start()
    try:
        env.reconcile("big")
        assert writer.flush(5) and client.sent == 1
        clock.t += 61
        before = acted()
        assert env.rec.backstop.sweep() == [f"{NS}/big"]
        env.reconcile("big")
        assert writer.flush(5) and client.sent == 2  # written again, refused again
        assert acted() == before
        assert [e[2] for e in env.recorder.events].count("StatusRefused") == 2
    finally:
        writer.stop()
