"""Groups of the real LeaderWorkerSet and JobSet controllers placed by the manager's
pod binding, as a user runs them (issue 34's "How we will know"): a LeaderWorkerSet
whose members ask for NVLink-local devices gets them, group by group; two JobSets
created together on room for one: one runs, the other holds nothing and says why,
and runs once the first is deleted.

Each test's nodes are its own kwok nodes (``NodeGroup``), taking named devices; the
members select them."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from api.v1alpha1.types import API_VERSION
from runtime import Client, NotFound
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    group,
    installed,
)
from tests.integration.podgroups.controllers import (
    JOBSET,
    LWS,
    gpu_pod,
    jobset,
)
from tests.integration.podgroups.fixtures import (
    JOBSET_NAME,
    LWS_NAME,
    bound,
    members,
    named_nodes,
    nodes_shown,
    on_nodes,
    peer_fixtures,
    pinned,
    told,
)
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"
TOPOLOGY = "gpu.orchestrator.dev/topology"
#: two NVLink islands of an 8-GPU board, the even and the odd devices: of the
#: 4-device sets, only these two are NVLink-local (0-3 and 4-7 are not)
ISLANDS = (frozenset({0, 2, 4, 6}), frozenset({1, 3, 5, 7}))


peers, binder = peer_fixtures(JOBSET, LWS)


def _island_devices(node: str) -> list[dict[str, Any]]:
    return [{"index": i, "uuid": f"GPU-{node}-{i}", "model": "NVIDIA H100 80GB HBM3",
             "memoryTotalMiB": 81559, "healthy": True,
             "nvlinkPeers": sorted(next(s for s in ISLANDS if i in s) - {i})}
            for i in range(8)]


@contextlib.contextmanager
def nvlink_islands(admin: Client, nodes: list[str]) -> Iterator[None]:  # noqa: F811
    """Each node's GPUNode as its agent writes it: 8 devices in two NVLink islands,
    its heartbeat kept fresh while the test runs; deleted at the end."""
    for node in nodes:
        admin.create({"apiVersion": API_VERSION, "kind": "GPUNode",
                      "metadata": {"name": node}, "spec": {"nodeName": node}})
    stop = threading.Event()

    def beat() -> None:
        while True:
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            for node in nodes:
                devices = _island_devices(node)
                admin.patch(API_VERSION, "GPUNode", node, {"status": {
                    "devices": devices, "deviceCount": 8, "healthyCount": 8,
                    "topologyKnown": True, "lastHeartbeatTime": now}}, subresource="status")
            if stop.wait(15):
                return
    beat_once = threading.Thread(target=beat, daemon=True, name="gpunode-heartbeat")
    beat_once.start()
    try:
        yield
    finally:
        stop.set()
        beat_once.join(30)
        for node in nodes:
            with contextlib.suppress(NotFound):
                admin.delete(API_VERSION, "GPUNode", node)


def lws(name: str, group: NodeGroup, topology: str) -> dict[str, Any]:  # noqa: F811
    """2 LWS groups of a leader and a worker, 4 GPUs each, asking ``topology``."""
    pod = pinned(gpu_pod(4), group)
    pod["metadata"] = {"annotations": {TOPOLOGY: topology}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2,
                                                             "workerTemplate": pod}}}


@pytest.mark.parametrize("topology", ["Required", "Preferred"])
def test_each_lws_group_lands_on_nvlink_local_devices(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        topology: str) -> None:
    """2 groups x 2 pods x 4 GPUs on 2 nodes of 8 GPUs whose NVLink islands are the
    even and the odd devices: every member's 4 devices are one island (a picker that
    ignores NVLink takes 0-3 and 4-7, each split across both islands)."""
    nodes = binder.wait_nodes(named_nodes(group, 2, gpus=8))
    with nvlink_islands(admin, nodes):
        for node in nodes:
            binder.sees(node, lambda i: i.topology_known and len(i.usable) == 8,
                        "8 devices in NVLink islands")
        admin.create(lws("infer", group, topology), namespace=namespace)
        placed = eventually(lambda: (lambda ps: ps if len(bound(ps)) == 4 else None)(
            members(admin, namespace, "infer", LWS_NAME)), timeout=120,
            what="the LeaderWorkerSet's 4 pods bound")
        got = {p["metadata"]["name"]: (p["spec"]["nodeName"],
                                       p["metadata"]["annotations"].get(DEVICES))
               for p in placed}
        sets = {name: frozenset(int(d) for d in devs.split(",")) for name, (_, devs)
                in got.items()}
        assert all(s in ISLANDS for s in sets.values()), got
        # no device given twice: each node's two members take its two islands
        for node in nodes:
            on = [sets[n] for n, (at, _) in got.items() if at == node]
            assert sorted(on, key=min) == list(ISLANDS), got


def test_two_racing_jobsets_on_room_for_one_one_runs_the_other_holds_nothing(
        binder: Running, admin: Client, namespace: str, group: NodeGroup,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two 4 x 4-GPU JobSets created together on 4 nodes x 4 GPUs: per-pod binding
    ended them at 3/4 and 1/4 bound, all 16 GPUs held, for good. Whole or nothing:
    one runs, the other has no pod bound and no device held (``kubectl gpu nodes``),
    its members say why, and it runs once the first is deleted."""
    named_nodes(group, 4)
    for name in ("red", "blue"):
        admin.create(on_nodes(jobset(name, [("launcher", 1, 1), ("workers", 3, 1)]), group),
                     namespace=namespace)

    def settled() -> tuple[str, str] | None:
        counts = {n: len(bound(members(admin, namespace, n))) for n in ("red", "blue")}
        if sorted(counts.values()) != [0, 4]:
            return None
        ran = max(counts, key=counts.__getitem__)
        return ran, ("blue" if ran == "red" else "red")
    ran, waits = eventually(settled, timeout=120, what="one JobSet bound whole, the other not")
    # every member exists (the Job controller may still be making the last one when
    # the other JobSet is bound whole); none is bound
    waiting = eventually(lambda: ms if len(ms := members(admin, namespace, waits)) == 4
                         else None, timeout=60, what=f"JobSet {waits}'s 4 members made")
    assert bound(waiting) == []
    why = eventually(lambda: told(admin, namespace, waiting, "FailedScheduling", "pod group"),
                     timeout=60, what="a FailedScheduling Event naming the pod group")
    assert f"jobset:{waits}:0" in why and "4 of 4 members to place" in why, why
    # what the user sees: every device of the nodes held by the one that runs
    shown = nodes_shown(binder.cluster.kubeconfig, capsys, group.names)
    holders = [str(d.get("holder")) for n in shown for d in n["devices"]]
    assert len(holders) == 16, shown
    # each device names the Job of its member (<ns>/job/<jobset>-<replicated job>-<i>)
    assert not [h for h in holders if h.startswith(f"{namespace}/job/{waits}-")], holders
    assert all(h.startswith(f"{namespace}/job/{ran}-") for h in holders), holders
    assert bound(members(admin, namespace, waits)) == []
    admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", ran, namespace,
                 propagation_policy="Foreground")
    eventually(lambda: len(bound(members(admin, namespace, waits))) == 4, timeout=120,
               what=f"JobSet {waits} placed whole once {ran} is deleted")


def test_groups_waiting_when_the_manager_starts_never_share_a_device(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:  # noqa: F811
    """Three JobSets of 4 x 2 GPUs made while the manager is down (a restart, a kill
    -9), on 4 nodes x 4 GPUs, room for two: once it starts, two are bound whole, the
    third holds nothing, and no device is given to two members. (Found by the group
    churn: groups made just after a kill -9 were placed onto one another's devices.)"""
    named_nodes(group, 4)
    binder.stop()
    try:
        for name in ("a", "b", "c"):
            admin.create(on_nodes(jobset(name, [("workers", 2, 2)]), group, 2),  # 2 Jobs x 2 pods
                         namespace=namespace)
        eventually(lambda: sum(len(members(admin, namespace, n)) for n in "abc") == 12,
                   timeout=90, what="the three JobSets' 12 pods made")
    finally:
        binder.start()

    def placed() -> list[dict[str, Any]] | None:
        pods = [p for n in "abc" for p in bound(members(admin, namespace, n))]
        return pods if len(pods) >= 8 else None
    eventually(placed, timeout=90, what="two JobSets bound")
    time.sleep(5)  # anything more the manager would bind
    pods = [p for n in "abc" for p in bound(members(admin, namespace, n))]
    held = Counter((p["spec"]["nodeName"], d) for p in pods
                   for d in p["metadata"]["annotations"][DEVICES].split(","))
    assert [k for k, n in held.items() if n > 1] == [], sorted(
        (p["spec"]["nodeName"], p["metadata"]["annotations"][DEVICES], p["metadata"]["name"])
        for p in pods)
    per_set = Counter(p["metadata"]["labels"][JOBSET_NAME] for p in pods)
    assert sorted(per_set.values()) == [4, 4], per_set
