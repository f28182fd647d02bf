"""The NVML agent against the real local control plane, with the fixture backend and
the agent's own RBAC (config/agent): it creates and keeps current the GPUNode of a
kwok node, labels the node, reports a device that turns unhealthy, and once stopped
its GPUNode turns stale."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from api.v1alpha1.policies import NODE_NAME_EXTRA
from hack.testenv import ControlPlane
from internal.agent.agent import Agent, run_agent
from internal.agent.nvml import FixtureBackend
from internal.scheduling.inventory import is_stale, scheduling_view
from internal.scheduling.snapshot import Snapshot
from runtime.client import Client
from tests.waiting import eventually

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NS = "gpu-orchestrator-system"
SA = f"system:serviceaccount:{NS}:gpu-orchestrator-agent"
NODE = "agent-h100"
GROUP = "/apis/gpu.orchestrator.dev/v1alpha1"


@pytest.fixture(scope="module")
def agent_rbac(cluster: ControlPlane) -> ControlPlane:
    # The GPUNode CRD alone: the agent needs nothing else from config/crd.
    cluster.kubectl("apply", "-f", os.path.join(ROOT, "config", "crd",
                                                "gpu.orchestrator.dev_gpunodes.yaml"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/gpunodes.gpu.orchestrator.dev")
    code, body = cluster.api("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    assert code in (201, 409), body
    cluster.kubectl("apply", "-k", os.path.join(ROOT, "config", "agent"))
    return cluster


class RunningAgent:
    def __init__(self, cluster: ControlPlane, backend: FixtureBackend) -> None:
        # The agent acts as its ServiceAccount, so config/agent's RBAC is what allows it.
        # Its token is bound to its pod on NODE, as a projected token is (the
        # admission policies of config/crd let it write only that node's GPUNode).
        client = Client.from_kubeconfig(str(cluster.kubeconfig)).impersonate(
            SA, ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
            {NODE_NAME_EXTRA: [NODE]})
        self.stop = threading.Event()
        self.started = threading.Event()
        self.agent: Agent | None = None

        def on_started(agent: Agent, _server: Any) -> None:
            self.agent = agent
            self.started.set()

        self.thread = threading.Thread(
            target=run_agent, name="agent-under-test",
            args=(NODE, None, backend, 0.5, "0", self.stop),
            kwargs={"poll_interval": 0.1, "client": client, "on_started": on_started},
        )
        self.thread.start()
        assert self.started.wait(10)

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def h100() -> FixtureBackend:
    return FixtureBackend.load("h100-sxm-8")


@pytest.fixture
def running(agent_rbac: ControlPlane, h100: FixtureBackend) -> Iterator[RunningAgent]:
    agent_rbac.create_nodes([NODE], 8)
    ra = RunningAgent(agent_rbac, h100)
    try:
        yield ra
    finally:
        ra.halt()
        # Other modules count the cluster's nodes and GPUs: leave none behind.
        agent_rbac.api("DELETE", f"{GROUP}/gpunodes/{NODE}")
        agent_rbac.api("DELETE", f"/api/v1/nodes/{NODE}")


def _gpunode(cluster: ControlPlane) -> dict[str, Any] | None:
    code, body = cluster.api("GET", f"{GROUP}/gpunodes/{NODE}")
    return body if code == 200 and (body.get("status") or {}).get("devices") else None


def test_agent_keeps_the_gpunode_current_and_it_goes_stale_when_stopped(
        cluster: ControlPlane, running: RunningAgent, h100: FixtureBackend) -> None:
    g = eventually(lambda: _gpunode(cluster), timeout=30, what="GPUNode reported")
    st = g["status"]
    assert (st["deviceCount"], st["healthyCount"], st["topologyKnown"]) == (8, 8, True)
    assert st["devices"][0]["model"] == "NVIDIA H100 80GB HBM3"
    assert st["devices"][0]["memoryTotalMiB"] == 81559
    assert st["devices"][4]["nvlinkPeers"] == [0, 1, 2, 3, 5, 6, 7]
    assert g["spec"]["nodeName"] == NODE
    code, node = cluster.api("GET", f"/api/v1/nodes/{NODE}")
    assert code == 200
    assert g["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    labels = node["metadata"]["labels"]
    assert labels["gpu.orchestrator.dev/gpu-count"] == "8"
    assert labels["gpu.orchestrator.dev/gpu-model"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["gpu.orchestrator.dev/nvlink"] == "true"
    assert labels["kubernetes.io/hostname"] == NODE  # others' labels untouched

    # The heartbeat moves on while the agent runs.
    first = st["lastHeartbeatTime"]
    eventually(lambda: (_gpunode(cluster) or {}).get("status", {}).get("lastHeartbeatTime")
               != first, timeout=10, what="heartbeat advances")
    assert not is_stale(_gpunode(cluster) or {}, datetime.now(UTC), 5)

    # A device turning unhealthy is reported, and the scheduler stops offering it.
    h100.mark_unhealthy(3)

    def device3_unhealthy() -> dict[str, Any] | None:
        g = _gpunode(cluster)
        return g if g and g["status"]["devices"][3]["healthy"] is False else None

    g = eventually(device3_unhealthy, timeout=10, what="device 3 reported unhealthy")
    assert g["status"]["healthyCount"] == 7 and g["status"]["devices"][3]["eccErrors"] == 1
    snap = Snapshot.build([node], [scheduling_view(node, g, datetime.now(UTC), 5)])
    info = snap.get(NODE)
    assert info is not None and info.usable == frozenset(range(8)) - {3}

    # Stop the agent: no more heartbeats, and the GPUNode turns stale.
    running.halt()
    last = _gpunode(cluster)
    assert last is not None
    eventually(lambda: is_stale(_gpunode(cluster) or {}, datetime.now(UTC), 2),
               timeout=10, what="GPUNode stale")
    g = _gpunode(cluster)
    assert g is not None and g["status"]["lastHeartbeatTime"] == last["status"][
        "lastHeartbeatTime"]
    snap = Snapshot.build([node], [scheduling_view(node, g, datetime.now(UTC), 2)])
    info = snap.get(NODE)
    assert info is not None and info.usable == frozenset() and len(info.devices) == 8


def test_agent_service_account_may_not_touch_other_objects(agent_rbac: ControlPlane) -> None:
    client = Client.from_kubeconfig(str(agent_rbac.kubeconfig)).impersonate(
        SA, ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"])
    from runtime import errors

    with pytest.raises(errors.Forbidden):
        client.list("v1", "Pod", namespace="default")
    with pytest.raises(errors.Forbidden):
        client.delete("gpu.orchestrator.dev/v1alpha1", "GPUNode", "anything")
