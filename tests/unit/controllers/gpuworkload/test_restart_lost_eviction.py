"""A kill -9 of the manager after a preemption, before the victim's status write
landed (the status writer is asynchronous: the write dies with the process), with
the fakes (no server).

The victim (``low``) had taken in its eviction: its pod was asked to go and went,
the preemptor (``high``) made its pod on the devices, and the victim's status
(``Preempted``, placements cleared) never reached the API: it still names the
devices ``high``'s pod holds. The restarted manager books what runs first
(docs/architecture.md, invariant 4), so the victim's stale placement is not booked.
What a user sees: ``high`` keeps running and spends nothing; ``low`` reports why
it is not placed, spends no retry (it failed at nothing: the previous process lost
a write), and is placed again once there is room; no device is held by two.

The queue churn met this once (bench/README.md, "one workload spent a retry on a
placement conflict after a kill -9"): w130's status named a device w117 held.
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1.types import GPUWorkload
from runtime.store import thaw
from tests.unit.controllers.fakes import NS, Env, running

RETRIES = {"maxRetries": 10, "backoffSeconds": 60}



def preempted_and_replaced(env: Env) -> tuple[dict[str, Any], dict[str, Any]]:
    """``low`` runs on node1's 4 GPUs; ``high`` preempts it, ``low`` takes in its
    eviction, its pod goes, ``high``'s pod is made there. Returns the API's copies
    of ``low`` and ``high`` from before ``low`` took in its eviction and from
    before ``high`` made its pod (what the API holds if those writes are lost)."""
    env.workload("low", gpusPerReplica=4, priority="low", retryPolicy=RETRIES)
    env.settle("low")
    running(env, "low")
    env.workload("high", gpusPerReplica=4, priority="high", schedulingStrategy="priority",
                 retryPolicy=RETRIES)
    env.settle("high")
    low_uid = env.get("low")["metadata"]["uid"]
    assert env.status("high")["nominatedOver"] == [f"{low_uid}#0"]
    low_before = thaw(env.get("low"))
    env.settle("low")  # takes in its eviction: low-0 is asked to go
    assert env.condition("low", "Preempted")["status"] == "True"
    env.pod_gone("low-0")
    env.settle("low")
    high_before = thaw(env.get("high"))
    env.settle("high")
    running(env, "high")
    return low_before, high_before


def restart_and_settle(env: Env) -> None:
    env.restart()
    for _ in range(2):
        env.settle("high")
        env.settle("low")


def check_after_restart(env: Env) -> None:
    # the preemptor keeps its placement and spends nothing
    assert env.status("high")["phase"] == "Running", env.status("high")
    assert env.status("high").get("retries", 0) == 0
    assert env.warnings("high") == []
    assert env.pod("high-0") is not None
    # the victim runs nowhere, says why, and spends no retry
    low = env.status("low")
    assert low["phase"] == "Pending", low
    assert not low.get("placements"), low
    assert low.get("retries", 0) == 0, (low, env.warnings("low"))
    assert env.condition("low", "Scheduled")["status"] == "False"
    assert env.overlaps() == []
    # placed again once there is room (high is deleted, its pod goes), at once:
    # freed capacity wakes it, no backoff to wait out
    env.delete_workload("high")
    env.settle("high")
    if env.pod("high-0") is not None:
        env.pod_gone("high-0")
    env.settle("high")
    env.settle("low")
    running(env, "low")
    assert env.status("low").get("retries", 0) == 0
    assert env.overlaps() == []


def test_a_victim_whose_preempted_status_was_lost_spends_no_retry_after_a_restart() -> None:
    """The preemptor's own writes landed (its nomination ended when its pod was
    made): nothing in the API says ``low`` was preempted, only that its placement
    names devices another workload's running pod holds."""
    env = Env()
    low_before, _ = preempted_and_replaced(env)
    assert env.status("high").get("nominatedOver") is None
    env.workloads.add(low_before)  # low's Preempted write never landed

    restart_and_settle(env)
    assert any(p.startswith(f"{NS}/low: placement not booked") for p in env.rebuild_problems)
    check_after_restart(env)


def test_a_victim_named_by_a_running_preemptors_nomination_spends_no_retry() -> None:
    """The preemptor's last write was lost too: its status still names the
    victim's attempt in ``nominatedOver`` while its pod runs."""
    env = Env()
    low_before, high_before = preempted_and_replaced(env)
    env.workloads.add(low_before)  # low's Preempted write never landed
    env.workloads.add(high_before)  # nor high's (its nomination over low ended)
    assert env.status("high")["nominatedOver"]

    restart_and_settle(env)
    assert env.status("high").get("nominatedOver") is None  # its pod runs: nothing waited for
    check_after_restart(env)


def test_a_pod_of_the_previous_leader_landing_after_the_rebuild_spends_no_retry() -> None:
    """The previous leader's create of ``w109``'s pod (its commit point) and its
    status write were in flight when it stopped (an etcd pause: its lease lost, the
    manager exits, the API server holds the requests); the new leader's rebuild saw
    neither and booked ``w117`` on the devices; then both land. ``w109``'s attempt
    ends (what was booked first keeps the devices), spending no retry; ``w117``
    starts once ``w109``'s pod is gone; no device is held by two."""
    env = Env()
    env.workload("w109", gpusPerReplica=4, retryPolicy=RETRIES)
    before = thaw(env.get("w109"))
    env.client.lag = True  # the create is in flight: the caches do not show it
    env.reconcile("w109")
    landed = thaw(env.get("w109"))
    assert landed["status"]["placements"] and ("Pod", "w109-0") in env.client.lagging
    env.workloads.add(before)  # its status write in flight too
    env.client.lag = False

    env.restart()
    env.workload("w117", gpusPerReplica=4, retryPolicy=RETRIES)
    assert env.state.decide(GPUWorkload.model_validate(env.get("w117"))).ok
    assert env.state.commit(f"{NS}/w117")  # its reconcile: committed, child not made yet
    env.catch_up()  # the previous leader's pod lands
    env.put_workload(landed)  # and its status write

    env.settle("w109")
    assert env.status("w109").get("retries", 0) == 0, env.warnings("w109")
    assert env.condition("w109", "Scheduled")["reason"] == "PlacementConflict"
    assert env.overlaps() == []
    env.settle("w117")
    assert env.pod("w117-0") is None  # waits for w109's pod to go
    env.pod_gone("w109-0")
    env.settle("w109")
    env.settle("w117")
    running(env, "w117")
    assert env.overlaps() == []
    assert env.status("w109").get("retries", 0) == 0
    assert env.status("w117").get("retries", 0) == 0
