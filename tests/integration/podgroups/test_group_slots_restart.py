"""A placed group keeps its members' slots across a manager restart (docs/podgroups.md,
"After binding: each member keeps its slot"): each member's Binding names its group's
other slots, so a member deleted while the manager is down keeps its node and devices
held, shown held by ``kubectl gpu nodes``, and the member its Job makes again binds
there once the manager is back, ahead of a pod that asked for the same room.

Looked for after the group churn (seed 11) twice ended with a JobSet of one of four
members bound, holding its GPUs: before, the slots lived in the manager's memory,
and members made again after a restart waited for room other holders could take."""

from __future__ import annotations

import time
from typing import Any

import pytest

from runtime import Client
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    group,
    installed,
)
from tests.integration.podgroups.controllers import JOBSET, gpu_pod, jobset
from tests.integration.podgroups.fixtures import (
    bound,
    members,
    named_nodes,
    nodes_shown,
    on_nodes,
    peer_fixtures,
    pinned,
)
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

peers, binder = peer_fixtures(JOBSET)


def slot_of(pod: dict[str, Any]) -> tuple[str, str]:
    labels = pod["metadata"]["labels"]
    return labels[JOB_INDEX], labels[COMPLETION_INDEX]


def where(pod: dict[str, Any]) -> tuple[str, str]:
    return pod["spec"]["nodeName"], pod["metadata"]["annotations"][DEVICES]


def test_a_member_deleted_while_the_manager_is_down_gets_its_slot_back(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    nodes = named_nodes(group, 2)  # 8 GPUs: the JobSet's 4 members x 2 fill them
    js = on_nodes(jobset("train", [("workers", 2, 2)]), group, 2)
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["backoffLimit"] = 3  # a deleted member is made again
    admin.create(js, namespace=namespace)
    placed = eventually(lambda: (b := bound(members(admin, namespace, "train"))) and
                        len(b) == 4 and b, timeout=90, what="the JobSet bound whole")
    slots = {slot_of(p): where(p) for p in placed}
    gone = placed[0]
    binder.stop()
    try:
        admin.delete("v1", "Pod", gone["metadata"]["name"], namespace, grace_period_seconds=0)
        again = eventually(lambda: next((p for p in members(admin, namespace, "train")
                                         if p["metadata"]["name"] != gone["metadata"]["name"]
                                         and slot_of(p) == slot_of(gone)), None),
                           timeout=60, what="the member made again by its Job")
        # another pod asking for the same room, made while the manager is down
        rival = pinned(gpu_pod(2), group)
        rival.update(apiVersion="v1", kind="Pod", metadata={"name": "rival"})
        admin.create(rival, namespace=namespace)
        # what the user sees meanwhile: the slot is held, not free
        node, devs = slots[slot_of(gone)]
        shown = {n["name"]: n for n in nodes_shown(binder.cluster.kubeconfig, capsys, nodes)}
        free = {str(d["index"]) for d in shown[node]["devices"] if d["free"]}
        assert not free & set(devs.split(",")), (node, devs, shown[node])
    finally:
        binder.start()
    eventually(lambda: (p := admin.get("v1", "Pod", again["metadata"]["name"], namespace))
               ["spec"].get("nodeName") and p, timeout=90, what="the member made again bound")
    time.sleep(3)  # anything more the manager would bind
    now = bound(members(admin, namespace, "train"))
    assert {slot_of(p): where(p) for p in now} == slots
    assert not admin.get("v1", "Pod", "rival", namespace)["spec"].get("nodeName")
