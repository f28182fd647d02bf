"""Conditions describe the present: a preemptor that runs no longer says it waits
for its victims; a Failed workload keeps ``Scheduled=False`` with the reason, and an
unschedulable one's last Event is ``FailedScheduling`` (what ``kubectl wait
--for=condition=Scheduled=false`` and ``--field-selector reason=FailedScheduling``
look for, docs/alerts.md)."""

from __future__ import annotations

from tests.unit.controllers.fakes import Env


def test_a_running_preemptor_says_where_it_was_placed_not_what_it_waited_for() -> None:
    env = Env()
    env.workload("low", gpusPerReplica=4, priority="low",
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.settle("low")
    env.set_phase("low-0", "Running")
    env.settle("low")
    env.workload("high", gpusPerReplica=4, priority="high", schedulingStrategy="priority")
    env.settle("high")
    env.settle("low")  # the victim takes its eviction in
    env.settle("high")
    assert env.condition("high", "Scheduled")["reason"] == "WaitingForPreemption"
    env.pod_gone("low-0")
    env.settle("low")  # sees its pod gone: its devices go
    env.settle("high")
    env.set_phase("high-0", "Running")
    env.settle("high")
    assert env.status("high")["phase"] == "Running"
    cond = env.condition("high", "Scheduled")
    assert (cond["status"], cond["reason"], cond["message"]) == \
        ("True", "Scheduled", "placed 1 replica(s) on node1")


def test_a_workload_that_cannot_fit_fails_with_scheduled_false_and_failed_scheduling() -> None:
    env = Env(gpus=1)
    env.workload("big", gpusPerReplica=2, retryPolicy={"maxRetries": 0})
    env.settle("big")
    st = env.status("big")
    assert st["phase"] == "Failed"
    cond = env.condition("big", "Scheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert "node1: 1 free GPU, needs 2" in cond["message"]
    assert env.condition("big", "Failed")["reason"] == "Unschedulable"
    reasons = [r for r, _ in env.warnings("big")]
    assert reasons == ["FailedScheduling"], reasons


def test_a_gang_that_exhausts_its_retries_keeps_scheduled_false_with_the_reason() -> None:
    env = Env(gpus=2)
    env.workload("gang", replicas=2, gpusPerReplica=1, retryPolicy={"maxRetries": 0})
    env.settle("gang")
    env.set_phase("gang-0", "Failed")
    env.settle("gang")
    assert env.status("gang")["phase"] == "Failed"
    cond = env.condition("gang", "Scheduled")
    assert (cond["status"], cond["reason"]) == ("False", "ReplicaFailed")
    assert "no retries left" in cond["message"]
