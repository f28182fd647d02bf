"""A Job-mode workload's phase comes from the pods the controller watches, never from
the Job's ``status.ready``/``status.active`` alone: kube-controller-manager may leave
those stale (after a kube-apiserver restart, ``{"active": 1, "ready": 0}`` for
minutes while every pod was Running and Ready). The Job's terminal conditions
(Complete, Failed: its backoffLimit) still decide when it has ended."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.types import API_VERSION, Phase
from controllers.gpuworkload.job_pods import pods_of_job, workload_of_job_pod
from controllers.status.conditions import aggregate, child_phase
from runtime import Request
from runtime.store import OWNER_UID_INDEX, Indexer, index_by_owner_uid, thaw
from tests.unit.controllers.fakes import NS, Env

STALE = {"active": 1, "ready": 0}


def job(name: str = "w-0", status: dict[str, Any] | None = None,
        owner: str = "GPUWorkload") -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "ownerReferences": [{"apiVersion": API_VERSION if owner ==
                                              "GPUWorkload" else "apps/v1",
                                              "kind": owner, "name": "w", "uid": "uid-w",
                                              "controller": True}]},
            "status": status if status is not None else dict(STALE)}


def pod_of(j: dict[str, Any], phase: str = "Running", name: str = "",
           deleting: bool = False, controller: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name or f"{j['metadata']['name']}-abcde", "namespace": NS,
        "uid": f"pod-{name or j['metadata']['name']}",
        "labels": {"gpu.orchestrator.dev/workload": "w"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                             "name": j["metadata"]["name"], "uid": j["metadata"]["uid"],
                             "controller": controller}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "status": {"phase": phase}}


# ------------------------------------------------------------------ the pure rule


def test_a_job_whose_pod_runs_is_running_whatever_its_stale_status_says() -> None:
    j = job()
    assert child_phase(j, [pod_of(j)]) == "Running"


def test_a_job_whose_status_counts_a_ready_pod_the_controller_does_not_see_is_pending() -> None:
    j = job(status={"active": 1, "ready": 1})
    assert child_phase(j, []) == "Pending"
    assert child_phase(j, [pod_of(j, "Pending")]) == "Pending"


def test_a_jobs_pod_that_ended_or_goes_runs_no_more_until_the_job_concludes() -> None:
    j = job()
    for pod in (pod_of(j, "Succeeded"), pod_of(j, "Failed"), pod_of(j, deleting=True)):
        assert child_phase(j, [pod]) == "Pending", pod
    # the Job controller made a new pod beside the one that goes
    assert child_phase(j, [pod_of(j, deleting=True), pod_of(j, name="w-0-new")]) == "Running"


def test_the_jobs_terminal_condition_decides_that_it_ended() -> None:
    for type_, phase in (("Complete", "Succeeded"), ("SuccessCriteriaMet", "Succeeded"),
                         ("Failed", "Failed"), ("FailureTarget", "Failed")):
        j = job(status={"conditions": [{"type": type_, "status": "True"}], "ready": 0})
        assert child_phase(j, [pod_of(j)]) == phase, type_
    gone = job()
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    assert child_phase(gone, [pod_of(gone)]) == "Lost"


def test_a_gang_of_jobs_with_stale_statuses_is_running_from_its_pods() -> None:
    jobs = [job("w-0"), job("w-1")]
    phases = {i: child_phase(j, [pod_of(j)]) for i, j in enumerate(jobs)}
    assert aggregate(phases, 2) == (Phase.RUNNING, "2 of 2 replica(s) running")
    phases[1] = child_phase(jobs[1], [pod_of(jobs[1], "Pending")])
    assert aggregate(phases, 2) == (Phase.SCHEDULED, "1 of 2 replica(s) running")


# ------------------------------------------------------------------ finding the pods


def caches(*objs: dict[str, Any]) -> tuple[Indexer, Indexer]:
    pods, jobs = Indexer({OWNER_UID_INDEX: index_by_owner_uid}), Indexer()
    for o in objs:
        (jobs if o["kind"] == "Job" else pods).add(o)
    return pods, jobs


def test_a_jobs_pods_are_those_it_controls_by_uid_never_by_label() -> None:
    j = job()
    mine = pod_of(j)
    not_controlled = pod_of(j, name="w-0-adopted", controller=False)
    labelled_only = pod_of(job("other"), name="w-0-impostor")  # our label, another Job
    pods, _ = caches(j, mine, not_controlled, labelled_only)
    assert pods_of_job(pods, j) == [mine]


def test_a_job_childs_pod_event_wakes_its_workload() -> None:
    j = job()
    foreign = job("f-0", owner="ReplicaSet")
    _, jobs = caches(j, foreign)
    wake = workload_of_job_pod(jobs, API_VERSION, "GPUWorkload")
    assert wake(pod_of(j)) == [Request(NS, "w")]
    assert wake(pod_of(foreign)) == []  # a Job that is not ours
    assert wake(pod_of(job("unseen"))) == []  # its Job not cached yet: the Job's event wakes it
    replaced = pod_of(j)
    replaced["metadata"]["ownerReferences"][0]["uid"] = "uid-of-an-older-w-0"
    assert wake(replaced) == []  # a Job of that name, not this one (identity is the UID)
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}}
    assert wake(plain) == []


# ------------------------------------------------------------------ the reconcile


def test_a_job_mode_gang_runs_when_its_pods_run_though_the_jobs_say_ready_0() -> None:
    """The user's view: every pod Running, the Jobs' summaries stale; the workload
    is Running with Ready=True, not ``Scheduled "0 of 2 replica(s) running"``."""
    env = Env(nodes=2)
    env.workload("w", gpusPerReplica=4, replicas=2, workloadKind="Job")
    env.settle("w")
    assert env.status("w")["phase"] == "Scheduled", env.status("w")
    for name in ("w-0", "w-1"):
        stale = thaw(env.jobs.get_by_name(name, NS))
        stale["status"] = dict(STALE)
        env.put_job(stale)
        env.job_pod(name)  # Running
    env.settle("w")
    assert env.status("w")["phase"] == "Running", env.status("w")
    assert env.status("w")["message"] == "2 of 2 replica(s) running"
    ready = env.condition("w", "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Running")
    # the Job controller's verdict still ends it
    env.set_job_condition("w-0", "Complete")
    env.set_job_condition("w-1", "Complete")
    env.settle("w")
    assert env.status("w")["phase"] == "Succeeded", env.status("w")
