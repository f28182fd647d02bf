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
from tests.integration.controller.conftest import NodeGroup, Running, events_for
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


def training(name: str, group: NodeGroup, workers: int = 3) -> dict[str, Any]:
    """A launcher Job and ``workers`` worker Jobs of one pod x 4 GPUs each."""
    js = jobset(name, [("launcher", 1, 1), ("workers", workers, 1)])
    for rj in js["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]["spec"]
        pod["nodeSelector"] = dict(group.selector)
        pod["terminationGracePeriodSeconds"] = 0
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
