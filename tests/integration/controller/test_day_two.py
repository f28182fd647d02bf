"""Day two, as a user lives it: scale a workload, edit its template, delete one of
its pods. Each is either applied by a visible restart (a condition and an Event
that say why, no retry spent) or refused at admission; status never claims more
replicas than the spec has."""

from __future__ import annotations

from api.v1alpha1.types import API_VERSION
from runtime import Client
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    events_for,
    get_workload,
    pods_of,
    wait_events,
    wait_phase,
    workload,
)
from tests.waiting import eventually

TEMPLATE = {"spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "train", "image": "trainer:v1"}]}}


def _running_with(admin: Client, ns: str, name: str, replicas: int, image: str) -> dict:
    def check() -> dict | None:
        w = get_workload(admin, ns, name)
        st = w.get("status") or {}
        pods = [p for p in pods_of(admin, ns, name)
                if not p["metadata"].get("deletionTimestamp")]
        ok = (st.get("phase") == "Running" and st.get("replicas") == replicas
              and len(pods) == replicas
              and all(p["spec"]["containers"][0]["image"] == image for p in pods))
        return w if ok else None
    return eventually(check, timeout=60, what=f"{name}: {replicas} x {image} running")


def test_scale_up_and_down_restarts_the_gang_onto_a_new_placement(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(2, gpus=2))
    admin.create(workload("train", namespace, replicas=2, gpusPerReplica=1,
                          nodeSelector=group.selector, template=TEMPLATE))
    w = _running_with(admin, namespace, "train", 2, "trainer:v1")
    assert w["status"]["selector"] == "gpu.orchestrator.dev/workload=train"
    # what `kubectl scale gw train --replicas=3` does: the scale subresource
    admin.patch(API_VERSION, "GPUWorkload", "train", {"spec": {"replicas": 3}},
                namespace=namespace, subresource="scale")
    w = _running_with(admin, namespace, "train", 3, "trainer:v1")
    assert w["status"]["retries"] == 0  # a spec change spends no retry
    wait_events(admin, namespace, "train", "SpecChanged")
    envs = {p["metadata"]["name"]: {e["name"]: e["value"]
                                    for e in p["spec"]["containers"][0]["env"]}
            for p in pods_of(admin, namespace, "train")}
    assert {v["WORLD_SIZE"] for v in envs.values()} == {"3"}
    admin.patch(API_VERSION, "GPUWorkload", "train", {"spec": {"replicas": 1}},
                namespace=namespace)
    w = _running_with(admin, namespace, "train", 1, "trainer:v1")
    assert len(w["status"]["placements"]) == 1


def test_a_template_edit_restarts_with_the_new_image(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=2))
    admin.create(workload("serve", namespace, gpusPerReplica=1, nodeSelector=group.selector,
                          template=TEMPLATE))
    _running_with(admin, namespace, "serve", 1, "trainer:v1")
    new = {"spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "train", "image": "trainer:v2"}]}}
    admin.patch(API_VERSION, "GPUWorkload", "serve", {"spec": {"template": new}},
                namespace=namespace)
    w = _running_with(admin, namespace, "serve", 1, "trainer:v2")
    assert w["status"]["retries"] == 0
    assert any(e["reason"] == "SpecChanged" and "template" in e["message"]
               for e in wait_events(admin, namespace, "serve", "SpecChanged"))


def test_a_deleted_gang_pod_restarts_the_gang_without_spending_a_retry(
        controller: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    controller.wait_nodes(group.add(1, gpus=2))
    admin.create(workload("gang", namespace, replicas=2, gpusPerReplica=1,
                          nodeSelector=group.selector, template=TEMPLATE,
                          retryPolicy={"maxRetries": 0}))
    wait_phase(admin, namespace, "gang", "Running")
    first = {p["metadata"]["uid"] for p in pods_of(admin, namespace, "gang")}
    admin.delete("v1", "Pod", "gang-1", namespace=namespace)
    eventually(lambda: any(e["reason"] == "ReplicaDeleted"
                           for e in events_for(admin, namespace, "gang")),
               what="ReplicaDeleted event")

    def restarted() -> dict | None:
        w = get_workload(admin, namespace, "gang")
        pods = [p for p in pods_of(admin, namespace, "gang")
                if not p["metadata"].get("deletionTimestamp")]
        uids = {p["metadata"]["uid"] for p in pods}
        ok = w["status"].get("phase") == "Running" and len(pods) == 2 and not uids & first
        return w if ok else None
    w = eventually(restarted, timeout=60, what="the whole gang restarted")
    # maxRetries 0, yet not Failed: the user's delete is not the workload's failure
    assert w["status"]["phase"] == "Running" and w["status"]["retries"] == 0
