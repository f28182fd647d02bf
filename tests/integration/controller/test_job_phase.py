"""A Job-mode workload's phase follows its pods, not the Job controller's summary of
them. After a kube-apiserver restart, kube-controller-manager left Jobs at
``{"active": 1, "ready": 0}`` for minutes while their pods were Running and Ready,
and the workloads stayed ``Scheduled "1 of 2 replica(s) running"``.

Here the stale summary is made for real: kwok is frozen for a moment (SIGSTOP, by
its PID), so the Jobs' pods stay Pending and the Job controller writes ``ready: 0``;
kube-controller-manager is then frozen and kwok let go on: the pods start Running
and Ready while no one updates the Jobs' status. Both go on at the end."""

from __future__ import annotations

import os
import signal

from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    get_workload,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.waiting import eventually


class Freezer:
    """Stops processes of the control plane with SIGSTOP, by their PIDs, and lets
    them go on (SIGCONT): a frozen kwok runs no pod, a frozen kube-controller-manager
    writes no Job status. ``thaw_all`` lets every one still frozen go on."""

    def __init__(self, cluster: ControlPlane) -> None:
        self.cluster = cluster
        self.frozen: dict[str, int] = {}

    def freeze(self, component: str) -> None:
        pid = self.cluster.pids()[component]
        os.kill(pid, signal.SIGSTOP)
        self.frozen[component] = pid

    def thaw(self, component: str) -> None:
        os.kill(self.frozen.pop(component), signal.SIGCONT)

    def thaw_all(self) -> None:
        for component in list(self.frozen):
            self.thaw(component)


def job_status(admin: Client, ns: str, name: str) -> dict:
    return admin.get("batch/v1", "Job", name, ns).get("status") or {}


def ready(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or ())


def test_a_job_mode_gang_runs_when_its_pods_do_though_the_jobs_status_is_stale(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=4))
    freezer = Freezer(controller.cluster)
    jobs = ("train-0", "train-1")
    try:
        freezer.freeze("kwok")
        admin.create(workload("train", namespace, workloadKind="Job", replicas=2,
                              gpusPerReplica=2, nodeSelector=group.selector))
        # the Job controller made both pods and counted them: active 1, ready 0
        eventually(lambda: len(pods_of(admin, namespace, "train")) == 2 and all(
            job_status(admin, namespace, j).get("active") == 1 and
            job_status(admin, namespace, j).get("ready") == 0 for j in jobs),
            timeout=60, what="the Jobs' pods made and counted, not running")
        w = wait_phase(admin, namespace, "train", "Scheduled")
        assert w["status"]["message"] == "0 of 2 replica(s) running", w["status"]
        freezer.freeze("kube-controller-manager")
        freezer.thaw("kwok")  # it runs the pods; nobody writes the Jobs' status
        eventually(lambda: [ready(p) for p in pods_of(admin, namespace, "train")]
                   == [True, True], timeout=30, what="both pods Running and Ready")
        for j in jobs:  # the summary is stale, as after the kube-apiserver restart
            assert job_status(admin, namespace, j).get("ready") == 0
        w = wait_phase(admin, namespace, "train", "Running", timeout=30)
        assert w["status"]["message"] == "2 of 2 replica(s) running", w["status"]
        cond = wait_condition(admin, namespace, "train", "Ready", "Running")
        assert cond["status"] == "True", cond
    finally:
        freezer.thaw_all()
    # the Job controller's verdict still ends it
    for pod in pods_of(admin, namespace, "train"):
        controller.cluster.set_pod_phase(namespace, pod["metadata"]["name"], "Succeeded")
    wait_phase(admin, namespace, "train", "Succeeded", timeout=60)
    assert get_workload(admin, namespace, "train")["status"]["message"] == \
        "all 2 replica(s) succeeded"
