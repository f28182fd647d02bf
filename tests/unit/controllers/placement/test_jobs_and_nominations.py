"""Two holes left by issue 11, with the fakes (no server):

- Job mode: the Job controller makes a Job's pod at a moment of its own, so a
  Job of ours holds its devices until it is gone from the API (or finished), not
  only while the ledger sees a pod of it. A preemptor waits for its victims' Jobs;
  an orphaned Job keeps its devices.
- A restart while a preemptor waits: its nomination is kept in its status
  (``nominatedOver``) and booked again by the rebuild, so it keeps waiting without
  spending a retry; a victim whose eviction was lost is evicted again.
"""

from __future__ import annotations

from api.v1alpha1.keys import DEVICES_ANNOTATION
from runtime.store import thaw
from tests.unit.controllers.fakes import NS, Env, running

FOUR = {0, 1, 2, 3}



def job_low(env: Env) -> None:
    """``low``, Job mode, 4 GPUs: placed, its Job made, its pod not made yet."""
    env.workload("low", gpusPerReplica=4, priority="low", workloadKind="Job",
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.settle("low")
    assert env.jobs.get_by_name("low-0", NS) is not None
    assert env.pods.list() == []


def high(env: Env) -> None:
    env.workload("high", gpusPerReplica=4, priority="high", schedulingStrategy="priority")
    env.settle("high")


# ------------------------------------------------------------------ Job mode


def test_a_job_mode_victim_without_a_pod_yet_is_waited_for_until_its_job_is_gone() -> None:
    """The window: no pod of the victim's exists when the preemptor looks, but the
    Job controller can still make one (it acts on a copy of the Job older than its
    deletion). Before, high-0 was created at once and low-0's late pod shared its
    GPUs."""
    env = Env()
    job_low(env)
    high(env)
    cond = env.condition("high", "Scheduled")
    assert cond["reason"] == "WaitingForPreemption", cond
    env.settle("low")  # takes in its eviction: its Job is deleted in the foreground
    job = env.client.of("delete", "Job")
    assert [c.name for c in job] == ["low-0"]
    assert job[0].opts["propagation_policy"] == "Foreground"
    env.settle("high")
    assert env.condition("high", "Scheduled")["message"] == \
        "waiting for 1 preempted Job(s) to terminate on node1"
    assert env.pod("high-0") is None

    env.job_pod("low-0", lagging=True)  # the Job controller, behind the deletion
    env.settle("high")
    assert env.condition("high", "Scheduled")["message"] == \
        "waiting for 1 preempted pod(s) and 1 preempted Job(s) to terminate on node1"
    assert env.pod("high-0") is None and env.overlaps() == []
    env.pod_gone("low-0-x")
    env.settle("high")
    assert env.pod("high-0") is None  # the Job is not gone yet
    env.job_gone("low-0")
    assert f"{NS}/high" in env.woken
    env.settle("high")
    assert env.pod("high-0") is None  # low has not seen its Job gone yet
    env.settle("low")  # the Job's deletion wakes it: none of its children is left
    env.settle("high")
    assert env.pod("high-0") is not None and env.overlaps() == []
    assert env.status("high").get("nominatedOver") is None


def test_a_job_victim_chosen_while_its_job_is_being_created_is_waited_for() -> None:
    """low's Job is created while high preempts it, and reaches the cache late: it
    holds from its create, and low's eviction deletes it though the cache has not
    shown it yet."""
    env = Env()
    env.workload("low", gpusPerReplica=4, priority="low", workloadKind="Job",
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.client.lag = True

    def high_meanwhile() -> None:
        high(env)
    env.client.before[("create", "Job", "low-0")] = high_meanwhile
    env.settle("low")
    assert env.state.eviction(f"{NS}/low") is not None
    env.settle("high")
    assert env.condition("high", "Scheduled")["message"] == \
        "waiting for 1 preempted Job(s) to terminate on node1"
    env.settle("low")
    assert env.client.names("delete", "Job") == ["low-0"]  # from what it made
    env.client.lag = False
    env.catch_up()
    env.settle("high")
    assert env.pod("high-0") is None
    env.job_gone("low-0")
    env.settle("low")
    env.settle("high")
    assert env.pod("high-0") is not None and env.overlaps() == []


def test_an_orphaned_job_keeps_its_devices_until_it_is_gone() -> None:
    """``kubectl delete gw w --cascade=orphan`` before the Job controller made the
    pod: the Job stays and will make it, so its GPUs are not handed out."""
    env = Env()
    env.workload("w", gpusPerReplica=4, workloadKind="Job")
    env.settle("w")
    env.delete_workload("w", orphan=True)
    env.settle("w")
    assert env.client.of("delete", "Job") == []
    # the garbage collector orphans the Job, then lets the object go
    job = thaw(env.jobs.get_by_name("w-0", NS))
    job["metadata"]["ownerReferences"] = []
    env.put_job(job)
    env.drop_workload("w")
    env.reconcile("w")
    assert env.state.booking(f"{NS}/w") is None
    env.workload("next", gpusPerReplica=1,
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.settle("next")
    assert env.condition("next", "Scheduled")["reason"] == "Unschedulable"
    env.job_pod("w-0")
    assert env.overlaps() == []
    env.set_phase("w-0-x", "Succeeded")
    env.settle("next")
    assert env.pod("next-0") is None  # the Job has not finished yet
    env.set_job_condition("w-0", "Complete")
    env.settle("next")
    assert env.pod("next-0") is not None and env.overlaps() == []


def test_a_restart_rebuilds_the_holdings_of_jobs_without_pods() -> None:
    env = Env()
    env.workload("w", gpusPerReplica=4, workloadKind="Job")
    env.settle("w")
    env.restart()
    assert env.free() == 0
    owners = {o for d, o in env.holders("node1").items()}
    assert len(owners) == 1


def test_a_device_plugin_job_its_pod_and_its_booking_count_their_gpus_once() -> None:
    env = Env(gpus=4)
    env.workload("w", gpusPerReplica=2, workloadKind="Job", deviceExposure="device-plugin")
    env.settle("w")
    env.job_pod("w-0")
    assert env.pod("w-0-x")["metadata"]["annotations"][DEVICES_ANNOTATION] == ""
    assert env.free() == 2


# ----------------------------------------------------------- restart, nominated


def pod_low_and_high(env: Env) -> None:
    env.workload("low", gpusPerReplica=4, priority="low",
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.settle("low")
    running(env, "low")
    high(env)


def test_a_restart_while_a_preemptor_waits_keeps_its_nomination_and_its_retries() -> None:
    env = Env()
    pod_low_and_high(env)
    env.settle("low")  # low-0 terminates for its grace period
    low_uid = env.get("low")["metadata"]["uid"]
    assert env.status("high")["nominatedOver"] == [f"{low_uid}#0"]

    env.restart()
    assert env.rebuild_problems == []
    env.settle("high")
    cond = env.condition("high", "Scheduled")
    assert cond["reason"] == "WaitingForPreemption", cond
    assert env.status("high").get("retries", 0) == 0
    assert env.warnings("high") == []
    env.workload("mid", gpusPerReplica=1, priority="medium",
                 retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
    env.settle("mid")  # nobody else may take the nominated devices
    assert env.condition("mid", "Scheduled")["reason"] == "Unschedulable"

    env.pod_gone("low-0")
    env.settle("high")
    assert env.pod("high-0") is not None and env.overlaps() == []
    assert env.status("high").get("nominatedOver") is None
    assert env.status("high").get("retries", 0) == 0


def test_a_restart_before_the_victim_took_in_its_eviction_evicts_it_again() -> None:
    """The preemptor's status was written, the victim's reconcile never ran: the
    rebuild books the victim's placement (its status still says so) and the
    nomination over it, and goes on with the preemption."""
    env = Env()
    pod_low_and_high(env)
    assert env.status("low")["phase"] == "Running"  # never told
    env.restart()
    assert env.state.eviction(f"{NS}/low") is not None
    assert f"{NS}/low" in env.woken
    env.settle("high")
    assert env.condition("high", "Scheduled")["reason"] == "WaitingForPreemption"
    env.settle("low")
    assert env.condition("low", "Preempted")["status"] == "True"
    assert env.client.names("delete", "Pod") == ["low-0"]
    env.pod_gone("low-0")
    env.settle("low")
    env.settle("high")
    assert env.pod("high-0") is not None and env.overlaps() == []
    assert env.status("high").get("retries", 0) == 0


def test_a_nomination_never_displaces_a_holder_of_another_owner() -> None:
    """A nominatedOver that names an owner which does not hold the devices (forged,
    or stale) books nothing over what runs: the placement conflicts and ends."""
    env = Env()
    env.workload("a", gpusPerReplica=4)
    env.settle("a")
    running(env, "a")
    env.workload("b", gpusPerReplica=4, priority="high")
    env.edit("b", lambda o: o.update(status={
        "phase": "Scheduled", "placements": [{"index": 0, "node": "node1",
                                              "devices": [0, 1, 2, 3]}],
        "nominatedOver": ["someone-else#0"]}))
    env.restart()
    assert any("nominated placement not booked" in p for p in env.rebuild_problems)
    env.settle("b")
    assert env.condition("b", "Scheduled")["reason"] == "PlacementConflict"
    assert env.pod("b-0") is None and env.pod("a-0") is not None
    assert env.overlaps() == []


def test_a_restart_does_not_evict_a_victim_placed_again_elsewhere() -> None:
    """high preempted v1 and v2 and waits for v2's pod; v1, its pod gone, was placed
    again on node2 (the same attempt: a preemption spends no retry, so the same
    owner high was nominated over). A restart must not evict v1 again."""
    env = Env(nodes=2)
    env.foreign_pod("fill", "node2", devices="0,1,2,3")
    for name in ("v1", "v2"):
        env.workload(name, gpusPerReplica=2, priority="low",
                     retryPolicy={"maxRetries": 10, "backoffSeconds": 60})
        env.settle(name)
        running(env, name)
    high(env)
    env.settle("v1")
    env.settle("v2")
    env.pod_gone("v1-0")
    env.pod_gone("fill")
    env.settle("v1")
    running(env, "v1")
    assert env.status("v1")["placements"][0]["node"] == "node2"
    env.settle("high")
    assert env.condition("high", "Scheduled")["message"] == \
        "waiting for 1 preempted pod(s) to terminate on node1"

    env.restart()
    assert env.state.eviction(f"{NS}/v1") is None
    env.settle("v1")
    assert env.status("v1")["phase"] == "Running" and env.client.names("delete", "Pod") == \
        ["v1-0", "v2-0"]
    env.pod_gone("v2-0")
    env.settle("high")
    assert env.pod("high-0") is not None and env.overlaps() == []
    assert env.status("high").get("retries", 0) == 0
