"""``kubectl delete gw w --cascade=orphan`` of a Pod-mode workload, with the
manager's ``--evict-conflicting-pods`` on (its default): the orphaned pods run on
and keep their GPUs (nobody else is given them until they end), with an
``Orphaned`` Event and no Warning; the same when the workload is orphaned while no
manager runs. A pod that forged our devices annotation is still evicted, its
Warning saying it is forged. Its own module: each test runs its own manager (one is
restarted), and no other may run meanwhile."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from api.v1alpha1.keys import DEVICES_ANNOTATION
from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client, NotFound
from tests.integration.controller.conftest import (
    NodeGroup,
    Running,
    events_for,
    get_workload,
    pods_of,
    wait_condition,
    wait_events,
    wait_phase,
    workload,
)
from tests.waiting import eventually

#: how long the orphans are watched: the manager evicted them within a second
SETTLE = 6
TPL = {"spec": {"terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox:1.36"}]}}


@pytest.fixture
def evicting(installed: ControlPlane) -> Iterator[Running]:
    run = Running(installed, evict_conflicting_pods=True).start()
    yield run
    run.stop()


def gone(c: Client, ns: str, name: str) -> bool:
    try:
        c.get(API_VERSION, "GPUWorkload", name, ns)
        return False
    except NotFound:
        return True


def orphan_delete(c: Client, ns: str, name: str) -> None:
    """``kubectl delete gw name --cascade=orphan``: DELETE with
    ``{"propagationPolicy": "Orphan"}``."""
    c.delete(API_VERSION, "GPUWorkload", name, namespace=ns, propagation_policy="Orphan")


def run_placed(c: Client, ns: str, name: str, group: NodeGroup, replicas: int,
               gpus: int) -> dict[str, str]:
    """Creates a Pod-mode workload and waits until it runs: its pods' UIDs by name."""
    c.create(workload(name, ns, replicas=replicas, gpusPerReplica=gpus,
                      nodeSelector=group.selector, template=TPL))
    wait_phase(c, ns, name, "Running")
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(c, ns, name)}


def assert_kept(c: Client, ns: str, uids: dict[str, str]) -> None:
    """Each pod is the same object, not being deleted, Running, owned by nobody, and
    has no Warning Event (no ``UnauthorizedDevices`` eviction, no ``DeviceConflict``)."""
    for name, uid in uids.items():
        try:
            pod = c.get("v1", "Pod", name, ns)
        except NotFound:
            raise AssertionError(f"orphan {name} was deleted") from None
        meta = pod["metadata"]
        assert meta["uid"] == uid, f"{name} was replaced"
        assert not meta.get("deletionTimestamp"), f"orphan {name} is being deleted"
        assert pod["status"].get("phase") == "Running"
        assert not meta.get("ownerReferences")
        warnings = [(e["reason"], e["message"]) for e in events_for(c, ns, name)
                    if e["type"] == "Warning"]
        assert warnings == [], f"{name}: {warnings}"


def assert_devices_held_then_freed(c: Client, ns: str, group: NodeGroup,
                                   uids: dict[str, str]) -> None:
    """A workload that needs the orphans' devices waits while they run, and is placed
    once they are deleted."""
    c.create(workload("next", ns, gpusPerReplica=2, nodeSelector=group.selector,
                      retryPolicy={"maxRetries": 10, "backoffSeconds": 60}))
    cond = wait_condition(c, ns, "next", "Scheduled", "Unschedulable")
    assert "free GPU" in cond["message"], cond["message"]
    time.sleep(2)  # still waiting a moment later: not a lag of the first decision
    assert not get_workload(c, ns, "next").get("status", {}).get("placements")
    assert_kept(c, ns, uids)
    for name in uids:
        c.delete("v1", "Pod", name, namespace=ns, grace_period_seconds=0)
    w = wait_phase(c, ns, "next", "Running", timeout=60)
    assert [p["devices"] for p in w["status"]["placements"]] == [[0, 1]]


@pytest.mark.parametrize("replicas, gpus", [(1, 2), (2, 1)], ids=["one", "gang"])
def test_orphaned_pods_keep_running_with_their_gpus(
        evicting: Running, admin: Client, namespace: str, group: NodeGroup,
        replicas: int, gpus: int) -> None:
    evicting.wait_nodes(group.add(1, gpus=2))
    uids = run_placed(admin, namespace, "w", group, replicas, gpus)
    orphan_delete(admin, namespace, "w")
    eventually(lambda: gone(admin, namespace, "w"), timeout=30, what="w deleted")
    time.sleep(SETTLE)
    assert_kept(admin, namespace, uids)
    for name in uids:
        orphaned, = [e for e in wait_events(admin, namespace, name, "Orphaned")
                     if e["reason"] == "Orphaned"]
        assert f"GPUWorkload {namespace}/w" in orphaned["message"]
        assert "keeps its devices" in orphaned["message"]
    assert_devices_held_then_freed(admin, namespace, group, uids)


def test_pods_orphaned_while_no_manager_runs_are_kept_by_the_next(
        installed: ControlPlane, admin: Client, namespace: str, group: NodeGroup) -> None:
    """The garbage collector orphans the pods while the manager is down (our
    finalizer keeps the workload until the next one); the next manager's ledger,
    rebuilt from the cache, knows them as the workload's pods: kept, still holding."""
    node = group.add(1, gpus=2)
    run = Running(installed, evict_conflicting_pods=True).start()
    try:
        run.wait_nodes(node)
        uids = run_placed(admin, namespace, "w", group, 2, 1)
    finally:
        run.stop()
    orphan_delete(admin, namespace, "w")
    eventually(lambda: all(not p["metadata"].get("ownerReferences")
                           for p in pods_of(admin, namespace, "w")),
               timeout=30, what="the garbage collector orphaned w's pods")
    run = Running(installed, evict_conflicting_pods=True).start()
    try:
        eventually(lambda: gone(admin, namespace, "w"), timeout=30, what="w deleted")
        for name in uids:  # any change makes the manager look at a pod again
            admin.patch("v1", "Pod", name, {"metadata": {"labels": {"team": "kept"}}},
                        namespace=namespace, patch_type="merge")
        time.sleep(SETTLE)
        assert_kept(admin, namespace, uids)
        assert_devices_held_then_freed(admin, namespace, group, uids)
    finally:
        run.stop()


def test_a_pod_that_forges_an_orphan_is_evicted_as_a_forgery(
        evicting: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """Beside a real orphan, a pod someone else made to look like one (its labels,
    the devices annotation on the node's free devices): the ledger never booked it
    as a workload's pod, so it is evicted, and its Warning says it is forged."""
    node, = evicting.wait_nodes(group.add(1, gpus=4))
    uids = run_placed(admin, namespace, "w", group, 1, 2)
    name, = uids
    orphan_delete(admin, namespace, "w")
    eventually(lambda: gone(admin, namespace, "w"), timeout=30, what="w deleted")
    labels = admin.get("v1", "Pod", name, namespace)["metadata"]["labels"]
    admin.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "forged", "namespace": namespace, "labels": labels,
                               "annotations": {DEVICES_ANNOTATION: "2,3"}},
                  "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                           "containers": [{"name": "c", "image": "x"}]}})

    def told() -> str | None:
        return next((e["message"] for e in events_for(admin, namespace, "forged")
                     if e["reason"] == "UnauthorizedDevices"), None)
    message = eventually(told, timeout=30, what="UnauthorizedDevices Event")
    assert f"{DEVICES_ANNOTATION}=2,3 was not set by gpu-orchestrator" in message
    assert "forged" in message

    def evicted() -> bool:
        try:
            return bool(admin.get("v1", "Pod", "forged", namespace)["metadata"]
                        .get("deletionTimestamp"))
        except NotFound:
            return True
    eventually(evicted, timeout=30, what="the forged pod evicted")
    time.sleep(2)
    assert_kept(admin, namespace, uids)
