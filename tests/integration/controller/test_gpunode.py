"""The placing controller using the NVML agent's GPUNodes, end to end: the real agent
loop (fixture backend, as its own ServiceAccount) keeps the GPUNode of each kwok node
current, and the GPUWorkload controller places on what it reports.

This module runs its own controller with a short staleness threshold (3 s); it never
requests the shared ``controller`` fixture, so only one placing controller runs.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.v1alpha1.policies import NODE_NAME_EXTRA
from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from internal.agent.agent import Agent, run_agent
from internal.agent.nvml import FixtureBackend
from internal.scheduling.framework import STALE_REASON
from internal.scheduling.snapshot import NodeInfo
from runtime import Client, NotFound
from tests.integration.controller.conftest import (
    ROOT,
    NodeGroup,
    Running,
    env_of,
    get_workload,
    pods_of,
    wait_condition,
    wait_phase,
    workload,
)
from tests.waiting import eventually

AGENT_NS = "gpu-orchestrator-system"
AGENT_SA = f"system:serviceaccount:{AGENT_NS}:gpu-orchestrator-agent"
AGENT_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{AGENT_NS}",
                "system:authenticated"]
STALE_AFTER = 3.0


@pytest.fixture(scope="module")
def placing(installed: ControlPlane) -> Iterator[Running]:
    run = Running(installed, stale_after=STALE_AFTER, stale_check_period=0.5).start()
    yield run
    run.stop()


class FakeGPUHost:
    """The agent of one kwok node, on a thread, reading a fixture backend."""

    def __init__(self, cluster: ControlPlane, node: str, fixture: str) -> None:
        self.cluster = cluster
        self.node = node
        self.backend = FixtureBackend.load(fixture)
        # a token bound to a pod on ``node``, as the DaemonSet's projected token is
        self.client = Client.from_kubeconfig(str(cluster.kubeconfig)).impersonate(
            AGENT_SA, AGENT_GROUPS, {NODE_NAME_EXTRA: [node]})
        self.thread: threading.Thread | None = None
        self.stop_event = threading.Event()

    def start(self) -> FakeGPUHost:
        started = threading.Event()
        self.stop_event = threading.Event()

        def on_started(_agent: Agent, _server: Any) -> None:
            started.set()

        self.thread = threading.Thread(
            target=run_agent, name=f"agent-{self.node}",
            args=(self.node, None, self.backend, 0.5, "0", self.stop_event),
            kwargs={"poll_interval": 0.1, "client": self.client, "on_started": on_started},
            daemon=True)
        self.thread.start()
        assert started.wait(10)
        return self

    def halt(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(10)
            assert not self.thread.is_alive(), f"agent of {self.node} did not stop"
            self.thread = None

    def gpunode(self, admin: Client) -> dict[str, Any]:
        return admin.get(API_VERSION, "GPUNode", self.node)


@pytest.fixture
def hosts(installed: ControlPlane, admin: Client) -> Iterator[Callable[[str, str], FakeGPUHost]]:
    """Starts an agent for a node: ``hosts(node, fixture)``. Stops them afterwards and
    deletes their GPUNodes."""
    started: list[FakeGPUHost] = []

    def start(node: str, fixture: str) -> FakeGPUHost:
        h = FakeGPUHost(installed, node, fixture).start()
        started.append(h)
        return h

    yield start
    for h in started:
        h.halt()
        with contextlib.suppress(NotFound):
            admin.delete(API_VERSION, "GPUNode", h.node)


def reported(run: Running, node: str, usable: int) -> NodeInfo:
    return run.sees(node, lambda i: i.has_gpunode and not i.stale and len(i.usable) == usable,
                    f"GPUNode with {usable} healthy devices")


def devices_of(w: dict[str, Any]) -> dict[int, list[int]]:
    return {p["index"]: p["devices"] for p in w["status"]["placements"]}


def all_running(admin: Client, ns: str, name: str, count: int) -> list[dict[str, Any]]:
    def check() -> list[dict[str, Any]] | None:
        pods = pods_of(admin, ns, name)
        ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
        return pods if ok else None
    return eventually(check, timeout=30, what=f"{ns}/{name}: {count} pod(s) Running")


# ------------------------------------------------------------------------ tests


def test_gang_gets_nvlink_connected_pairs(
        placing: Running, admin: Client, namespace: str, group: NodeGroup,
        hosts: Callable[[str, str], FakeGPUHost]) -> None:
    node, = placing.wait_nodes(group.add(1, gpus=8))
    host = hosts(node, "h100-sxm-8")
    reported(placing, node, 8)
    admin.create(workload("gang", namespace, replicas=4, gpusPerReplica=2, topology="Required",
                          nodeSelector=group.selector))
    w = wait_phase(admin, namespace, "gang", "Running")
    peers = {d["index"]: set(d["nvlinkPeers"]) for d in host.gpunode(admin)["status"]["devices"]}
    placements = devices_of(w)
    assert {p["node"] for p in w["status"]["placements"]} == {node}
    assert sorted(d for devs in placements.values() for d in devs) == list(range(8))
    for devs in placements.values():
        a, b = devs
        assert b in peers[a] and a in peers[b], (devs, peers)
    pods = all_running(admin, namespace, "gang", 4)
    for pod in pods:
        rank = int(env_of(pod, "RANK") or -1)
        assert env_of(pod, "CUDA_VISIBLE_DEVICES") == ",".join(map(str, placements[rank]))


def test_required_topology_is_refused_on_a_pcie_node(
        placing: Running, admin: Client, namespace: str, group: NodeGroup,
        hosts: Callable[[str, str], FakeGPUHost]) -> None:
    node, = placing.wait_nodes(group.add(1, gpus=4))
    hosts(node, "pcie-4")
    reported(placing, node, 4)
    admin.create(workload("linked", namespace, gpusPerReplica=2, topology="Required",
                          nodeSelector=group.selector))
    cond = wait_condition(admin, namespace, "linked", "Scheduled", "Unschedulable")
    assert f"{node}: no NVLink-connected set of 2 free GPUs" in cond["message"]
    admin.create(workload("preferred", namespace, gpusPerReplica=2, topology="Preferred",
                          nodeSelector=group.selector))
    wait_phase(admin, namespace, "preferred", "Running")


def test_unhealthy_device_is_not_offered_and_its_holder_keeps_running(
        placing: Running, admin: Client, namespace: str, group: NodeGroup,
        hosts: Callable[[str, str], FakeGPUHost]) -> None:
    node, = placing.wait_nodes(group.add(1, gpus=8))
    host = hosts(node, "h100-sxm-8")
    reported(placing, node, 8)
    admin.create(workload("holder", namespace, gpusPerReplica=2, nodeSelector=group.selector))
    before = wait_phase(admin, namespace, "holder", "Running")
    held = devices_of(before)[0]
    pod, = all_running(admin, namespace, "holder", 1)
    free = sorted(set(range(8)) - set(held))

    # One held device and one free device get uncorrected ECC errors.
    host.backend.mark_unhealthy(held[0])
    host.backend.mark_unhealthy(free[0])
    eventually(lambda: [d["healthy"] for d in host.gpunode(admin)["status"]["devices"]]
               .count(False) == 2, timeout=15, what="agent reports two unhealthy devices")
    reported(placing, node, 6)

    # 8 - 2 held - 1 free unhealthy = 5 offered.
    admin.create(workload("six", namespace, gpusPerReplica=6, nodeSelector=group.selector))
    cond = wait_condition(admin, namespace, "six", "Scheduled", "Unschedulable")
    assert f"{node}: 5 free GPUs (1 unhealthy), needs 6" in cond["message"]
    admin.create(workload("five", namespace, gpusPerReplica=5, nodeSelector=group.selector))
    five = wait_phase(admin, namespace, "five", "Running")
    assert sorted(devices_of(five)[0]) == free[1:]

    # The holder is untouched: same placement, same pod, still Running.
    after = get_workload(admin, namespace, "holder")
    assert after["status"]["phase"] == "Running"
    assert after["status"]["placements"] == before["status"]["placements"]
    same, = pods_of(admin, namespace, "holder")
    assert same["metadata"]["uid"] == pod["metadata"]["uid"]
    assert same["status"]["phase"] == "Running" and not same["metadata"].get("deletionTimestamp")


def test_stale_heartbeat_offers_nothing_and_keeps_placements(
        placing: Running, admin: Client, namespace: str, group: NodeGroup,
        hosts: Callable[[str, str], FakeGPUHost]) -> None:
    node, = placing.wait_nodes(group.add(1, gpus=8))
    host = hosts(node, "h100-sxm-8")
    reported(placing, node, 8)
    admin.create(workload("before", namespace, gpusPerReplica=2, nodeSelector=group.selector))
    before = wait_phase(admin, namespace, "before", "Running")
    pod, = all_running(admin, namespace, "before", 1)

    host.halt()  # the agent stops: no more heartbeats
    placing.sees(node, lambda i: i.stale and not i.usable, "stale, nothing offered")
    admin.create(workload("after", namespace, gpusPerReplica=1, nodeSelector=group.selector))
    cond = wait_condition(admin, namespace, "after", "Scheduled", "Unschedulable")
    assert f"{node}: {STALE_REASON}" in cond["message"]
    assert get_workload(admin, namespace, "after")["status"]["phase"] == "Pending"

    held = get_workload(admin, namespace, "before")
    assert held["status"]["phase"] == "Running"
    assert held["status"]["placements"] == before["status"]["placements"]
    same, = pods_of(admin, namespace, "before")
    assert same["metadata"]["uid"] == pod["metadata"]["uid"]
    assert same["status"]["phase"] == "Running"

    # The agent comes back: its devices are offered again, the waiting workload placed
    # beside the one that kept its devices.
    host.start()
    after = wait_phase(admin, namespace, "after", "Running")
    assert not set(devices_of(after)[0]) & set(devices_of(before)[0])


def test_least_loaded_prefers_the_node_reporting_lower_utilization(
        placing: Running, admin: Client, namespace: str, group: NodeGroup,
        hosts: Callable[[str, str], FakeGPUHost]) -> None:
    hot, cool = placing.wait_nodes(group.add(2, gpus=8))
    for node, util in ((hot, 90), (cool, 5)):
        h = hosts(node, "h100-sxm-8")
        for i in range(8):
            h.backend.update_device(i, {"utilization": {"gpu": util}})
    placing.sees(hot, lambda i: round(i.mean_utilization) == 90, "90% busy")
    placing.sees(cool, lambda i: round(i.mean_utilization) == 5, "5% busy")
    # cool also has fewer free GPUs: utilization decides before the free count
    admin.create(workload("filler", namespace, gpusPerReplica=2,
                          schedulingStrategy="annotationMap", schedulingMap=f"0={cool}:0,1"))
    wait_phase(admin, namespace, "filler", "Running")
    admin.create(workload("w", namespace, gpusPerReplica=2, schedulingStrategy="leastLoaded",
                          nodeSelector=group.selector))
    w = wait_phase(admin, namespace, "w", "Running")
    assert w["status"]["placements"][0]["node"] == cool


# ------------------------------------------------------------------- config/agent


def _target_node(pod: dict[str, Any]) -> str | None:
    """The node a DaemonSet pod is for: bound, or pinned by its node affinity."""
    if pod["spec"].get("nodeName"):
        return str(pod["spec"]["nodeName"])
    terms = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms") or []
    for t in terms:
        for f in t.get("matchFields") or ():
            if f.get("key") == "metadata.name" and f.get("values"):
                return str(f["values"][0])
    return None


def test_config_installs_the_agent_daemonset_for_gpu_nodes_only(
        placing: Running, installed: ControlPlane, admin: Client, namespace: str,
        group: NodeGroup) -> None:
    out = installed.kubectl("apply", "-k", os.path.join(ROOT, "config")).stdout  # idempotent
    assert "daemonset.apps/gpu-orchestrator-agent" in out
    ds = admin.get("apps/v1", "DaemonSet", "gpu-orchestrator-agent", AGENT_NS)
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == "gpu-orchestrator-agent"
    admin.get("v1", "ServiceAccount", "gpu-orchestrator-agent", AGENT_NS)

    gpu, = placing.wait_nodes(group.add(1, gpus=4, labels={"nvidia.com/gpu.present": "true"}))
    plain, = placing.wait_nodes(group.add(1, gpus=4))

    def agent_pods() -> list[dict[str, Any]]:
        return admin.list("v1", "Pod", namespace=AGENT_NS,
                          label_selector="app.kubernetes.io/name=gpu-orchestrator-agent")["items"]

    pod = eventually(lambda: next((p for p in agent_pods() if _target_node(p) == gpu), None),
                     timeout=30, what=f"agent pod for {gpu}")
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "nvidia.com/gpu" not in (pod["spec"]["containers"][0]["resources"].get("limits") or {})
    assert not [p for p in agent_pods() if _target_node(p) == plain]

    # The agent's pod takes no GPU: a workload still gets all four of the node's GPUs.
    admin.create(workload("all4", namespace, gpusPerReplica=4,
                          nodeSelector={**group.selector, "nvidia.com/gpu.present": "true"}))
    w = wait_phase(admin, namespace, "all4", "Running")
    assert w["status"]["placements"] == [{"index": 0, "node": gpu, "devices": [0, 1, 2, 3]}]

    # Nothing left behind: no scheduler binds the agent's pod here, so it stays Pending
    # (unbound pods outlive their node; neither the DaemonSet nor pod GC removes them).
    installed.api("DELETE", f"/api/v1/nodes/{gpu}")
    for p in agent_pods():
        if _target_node(p) == gpu:
            installed.api("DELETE", f"/api/v1/namespaces/{AGENT_NS}/pods/{p['metadata']['name']}")
