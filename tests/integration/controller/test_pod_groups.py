"""Another controller's gang on the local control plane, as a user runs it: a JobSet
(the real JobSet v0.12.0 controller and kube-controller-manager's Job controller make
the pods) whose pods say ``schedulerName: gpu-scheduler`` is placed whole, on exact
devices, or holds nothing (controllers/podbinding/groups.py, docs/podgroups.md).

Each test's nodes are its own group of kwok nodes, named (the ledger picks the
devices there; one authority per node), and the JobSets' pods select them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL
from hack.testenv import ControlPlane
from internal.cli.main import main
from runtime import Client, NotFound
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    delete_workload,
    events_for,
    get_workload,
    wait_condition,
    wait_phase,
    workload,
)
from tests.integration.podgroups.controllers import JOBSET, PeerController, jobset
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"


@pytest.fixture(scope="module")
def peers(installed: ControlPlane) -> Iterator[PeerController]:
    run = PeerController(installed, JOBSET).start()
    yield run
    run.stop()


@pytest.fixture(scope="module")
def binder(installed: ControlPlane, peers: PeerController) -> Iterator[Running]:
    """The manager with the pod binding, started once JobSets are served (it reads
    their sizes from its cache of them)."""
    run = Running(installed, pod_binding=True).start()
    yield run
    run.stop()


def training(name: str, group: NodeGroup, workers: int = 3, *, pods_per_job: int = 1,
             gpus: int = 4, retries: int = 0) -> dict[str, Any]:
    """A launcher Job and ``workers`` worker Jobs of ``pods_per_job`` pods x ``gpus``
    GPUs each; each Job retries a failed pod ``retries`` times (the same index)."""
    js = jobset(name, [("launcher", 1, pods_per_job), ("workers", workers, pods_per_job)])
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["backoffLimit"] = retries
        pod = rj["template"]["spec"]["template"]["spec"]
        pod["nodeSelector"] = dict(group.selector)
        pod["terminationGracePeriodSeconds"] = 0
        pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    return js


def pods_of(admin: Client, ns: str, name: str) -> list[dict[str, Any]]:
    return [p for p in admin.list("v1", "Pod", namespace=ns)["items"]
            if (p["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name") == name
            and not p["metadata"].get("deletionTimestamp")]


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def named_nodes(group: NodeGroup, count: int) -> list[str]:
    return group.add(count, 4, labels={DEVICE_AUTHORITY_LABEL: "named"})


def test_a_jobset_is_bound_whole_on_exact_devices(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    nodes = named_nodes(group, 4)
    admin.create(training("train", group), namespace=namespace)
    placed = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 4 else None)(
        pods_of(admin, namespace, "train")), timeout=90, what="the JobSet's 4 pods bound")
    assert sorted(p["spec"]["nodeName"] for p in placed) == sorted(nodes)
    assert all(p["metadata"]["annotations"].get(DEVICES) == "0,1,2,3" for p in placed)


def test_room_for_three_of_four_holds_no_gpu_and_says_why(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,
        capsys: pytest.CaptureFixture[str]) -> None:
    named_nodes(group, 3)
    admin.create(training("short", group), namespace=namespace)
    pods = eventually(lambda: (lambda ps: ps if len(ps) == 4 else None)(
        pods_of(admin, namespace, "short")), timeout=90, what="the JobSet's 4 pods made")

    def said() -> str | None:
        for p in pods:
            for e in events_for(admin, namespace, p["metadata"]["name"]):
                if e["reason"] == "FailedScheduling" and "pod group" in e["message"]:
                    return str(e["message"])
        return None
    why = eventually(said, timeout=60, what="a FailedScheduling Event naming the pod group")
    assert "4 of 4 members to place" in why
    assert bound(pods_of(admin, namespace, "short")) == []  # not 3 of 4: nothing held
    # what the user sees: the group, 4 of 4 members, none bound, and why
    assert main(["groups", "-n", namespace, "-o", "json",
                 "--kubeconfig", str(binder.cluster.kubeconfig)]) == 0
    (shown,) = json.loads(capsys.readouterr().out)["items"]
    assert (shown["group"], shown["size"], len(shown["members"]), shown["state"]) == (
        f"{namespace}/jobset:short:0", 4, 4, "Unschedulable")
    assert shown["why"].startswith("FailedScheduling: pod group"), shown["why"]
    named_nodes(group, 1)  # room appears: the whole group goes
    eventually(lambda: len(bound(pods_of(admin, namespace, "short"))) == 4, timeout=90,
               what="the JobSet placed once a fourth node came")


def test_a_jobset_that_cannot_fit_holds_nothing_so_the_one_that_fits_runs(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """The gang deadlock of per-pod binding: a 5-pod JobSet made first on 4 nodes took
    all 16 GPUs with 4 of its pods and the next JobSet waited for good. Whole or
    nothing: the 5-pod one holds nothing, the 4-pod one runs, and the 5-pod one runs
    once a fifth node comes."""
    named_nodes(group, 4)
    admin.create(training("big", group, workers=4), namespace=namespace)
    eventually(lambda: len(pods_of(admin, namespace, "big")) == 5, timeout=90,
               what="the 5-pod JobSet's pods made")
    admin.create(training("small", group), namespace=namespace)
    eventually(lambda: len(bound(pods_of(admin, namespace, "small"))) == 4, timeout=90,
               what="the 4-pod JobSet bound whole")
    assert bound(pods_of(admin, namespace, "big")) == []
    named_nodes(group, 1)
    with contextlib.suppress(NotFound):
        admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", "small", namespace,
                     propagation_policy="Foreground")
    eventually(lambda: len(bound(pods_of(admin, namespace, "big"))) == 5, timeout=120,
               what="the 5-pod JobSet placed whole once there is room for it")


def slots(pods: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """member (replicated job / job index / completion index) -> (node, devices)."""
    out = {}
    for p in pods:
        labels = p["metadata"]["labels"]
        member = (f"{labels['jobset.sigs.k8s.io/replicatedjob-name']}/"
                  f"{labels['jobset.sigs.k8s.io/job-index']}/"
                  f"{labels['batch.kubernetes.io/job-completion-index']}")
        out[member] = (p["spec"]["nodeName"], p["metadata"]["annotations"].get(DEVICES))
    return out


def test_a_member_replaced_by_its_job_comes_back_on_its_slot(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """A running group's member deleted: its Job makes it again (same index, same
    restart attempt) and the new pod binds to the old one's node and devices, while
    the others run; a GPUWorkload waiting for exactly that room never gets it."""
    named_nodes(group, 4)
    admin.create(training("keep", group, retries=3), namespace=namespace)
    placed = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 4 else None)(
        pods_of(admin, namespace, "keep")), timeout=90, what="the JobSet's 4 pods bound")
    before = slots(placed)
    # a GPUWorkload of the room one member holds, waiting (no room, no preemption)
    admin.create(workload("gap", namespace, gpusPerReplica=4, nodeSelector=group.selector,
                          retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
    wait_condition(admin, namespace, "gap", "Scheduled", "Unschedulable", timeout=60)
    victim = next(p for p in placed
                  if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
                  == "workers" and p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"]
                  == "1")
    others = {p["metadata"]["uid"] for p in placed} - {victim["metadata"]["uid"]}
    admin.delete("v1", "Pod", victim["metadata"]["name"], namespace, grace_period_seconds=0)

    def back() -> list[dict[str, Any]] | None:
        ps = pods_of(admin, namespace, "keep")
        new = [p for p in ps if p["metadata"]["uid"] not in others]
        return ps if len(bound(ps)) == 4 and len(new) == 1 and \
            new[0]["metadata"]["uid"] != victim["metadata"]["uid"] else None
    after = eventually(back, timeout=90, what="the deleted member made again and bound")
    assert {p["metadata"]["uid"] for p in after} >= others  # the others kept running
    assert slots(after) == before  # same node, same devices, member by member
    w = get_workload(admin, namespace, "gap")
    assert not (w.get("status") or {}).get("placements"), w.get("status")
    delete_workload(admin, namespace, "gap")


def test_a_preemptor_evicts_every_member_of_a_group_never_some(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """A 4 x 2-GPU JobSet fills 2 nodes x 4 GPUs; a priority GPUWorkload that needs 4
    GPUs (half the group's room) takes the whole group: every member is asked to go,
    not the 2 that would have made room."""
    named_nodes(group, 2)
    admin.create(training("gang", group, pods_per_job=2, workers=1, gpus=2),
                 namespace=namespace)
    placed = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 4 else None)(
        pods_of(admin, namespace, "gang")), timeout=90, what="the JobSet's 4 pods bound")
    admin.create(workload("urgent", namespace, gpusPerReplica=4, nodeSelector=group.selector,
                          priority="high", schedulingStrategy="priority"))

    def preempted() -> set[str] | None:
        names = {p["metadata"]["name"] for p in placed
                 if any(e["reason"] == "Preempted"
                        for e in events_for(admin, namespace, p["metadata"]["name"]))}
        return names if len(names) == 4 else None
    eventually(preempted, timeout=60, what="a Preempted Event on every member")
    wait_phase(admin, namespace, "urgent", "Running", timeout=90)
    delete_workload(admin, namespace, "urgent")


def test_a_preemptor_that_cannot_fit_evicts_no_member(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """The same group, a preemptor of 12 GPUs on 8: no member is asked to go."""
    named_nodes(group, 2)
    admin.create(training("stay", group, pods_per_job=2, workers=1, gpus=2),
                 namespace=namespace)
    placed = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 4 else None)(
        pods_of(admin, namespace, "stay")), timeout=90, what="the JobSet's 4 pods bound")
    admin.create(workload("huge", namespace, gpusPerReplica=4, replicas=3,
                          nodeSelector=group.selector, priority="high",
                          schedulingStrategy="priority"))
    wait_condition(admin, namespace, "huge", "Scheduled", "Unschedulable", timeout=60)
    assert not any(e["reason"] == "Preempted" for p in placed
                   for e in events_for(admin, namespace, p["metadata"]["name"]))
    assert {p["metadata"]["uid"] for p in bound(pods_of(admin, namespace, "stay"))} == \
        {p["metadata"]["uid"] for p in placed}
    delete_workload(admin, namespace, "huge")


def test_a_budget_that_allows_some_members_to_go_keeps_the_whole_group(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """A PodDisruptionBudget allowing 1 disruption over the group's 4 pods: the
    Eviction API would take one member and refuse the others, leaving a partial
    group; none is asked to go, and each member says why."""
    named_nodes(group, 2)
    admin.create(training("kept", group, pods_per_job=2, workers=1, gpus=2),
                 namespace=namespace)
    placed = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 4 else None)(
        pods_of(admin, namespace, "kept")), timeout=90, what="the JobSet's 4 pods bound")
    admin.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                  "metadata": {"name": "kept"},
                  "spec": {"minAvailable": 3, "selector": {"matchLabels": {
                      "jobset.sigs.k8s.io/jobset-name": "kept"}}}}, namespace=namespace)
    eventually(lambda: (admin.get("policy/v1", "PodDisruptionBudget", "kept", namespace)
                        .get("status") or {}).get("disruptionsAllowed") == 1, timeout=60,
               what="the budget allows 1 disruption")
    admin.create(workload("urgent", namespace, gpusPerReplica=4, nodeSelector=group.selector,
                          priority="high", schedulingStrategy="priority"))

    def refused() -> list[str] | None:
        said = [e["message"] for p in placed
                for e in events_for(admin, namespace, p["metadata"]["name"])
                if e["reason"] == "EvictionFailed"]
        return said if len(said) >= 4 else None
    said = eventually(refused, timeout=60, what="EvictionFailed on every member")
    assert "no member is evicted" in said[0], said[0]
    assert {p["metadata"]["uid"] for p in bound(pods_of(admin, namespace, "kept"))} == \
        {p["metadata"]["uid"] for p in placed}
    delete_workload(admin, namespace, "urgent")
