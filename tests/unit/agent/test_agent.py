"""The agent loop against an in-memory API: when it writes, what it writes, and how it
survives API errors. (The real API server is exercised in tests/integration.)"""

from __future__ import annotations

import threading
import urllib.request
from typing import Any

import pytest

from internal.agent.agent import NODE_NAME_EXTRA, Agent, WrongNode, run_agent
from internal.agent.nvml import FixtureBackend
from runtime import errors


class FakeClient:
    def __init__(self) -> None:
        self.gpunodes: dict[str, dict[str, Any]] = {}
        self.node_labels: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail: int = 0  # fail this many next calls with a 500
        self.token_node: str | None = None  # the node its token is bound to

    def _maybe_fail(self) -> None:
        if self.fail:
            self.fail -= 1
            raise errors.InternalError(500, "InternalError", "boom")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        return {"metadata": {"name": name, "uid": "uid-" + name}}

    def create(self, obj: dict[str, Any], namespace: str | None = None) -> Any:
        if obj["kind"] == "SelfSubjectReview":
            extra = {NODE_NAME_EXTRA: [self.token_node]} if self.token_node else {}
            return {**obj, "status": {"userInfo": {"username": "agent", "extra": extra}}}
        self._maybe_fail()
        self.calls.append(("create", obj["kind"]))
        self.gpunodes[obj["metadata"]["name"]] = dict(obj)
        return obj

    def patch(self, api_version: str, kind: str, name: str, patch: Any, **kw: Any) -> Any:
        self._maybe_fail()
        self.calls.append(("patch", kind))
        if kind == "Node":
            for k, v in patch["metadata"]["labels"].items():
                if v is None:
                    self.node_labels.pop(k, None)
                else:
                    self.node_labels[k] = v
            return {}
        if name not in self.gpunodes:
            raise errors.NotFound(404, "NotFound", "gpunodes not found")
        assert kw.get("subresource") == "status"
        self.gpunodes[name]["status"] = patch["status"]
        return self.gpunodes[name]

    def status_writes(self) -> int:
        return sum(1 for c in self.calls if c == ("patch", "GPUNode"))


def test_first_tick_creates_the_gpunode_writes_status_and_labels() -> None:
    c, be = FakeClient(), FixtureBackend.load("h100-sxm-8")
    a = Agent("n1", c, be, interval=3600, poll_interval=1)  # type: ignore[arg-type]
    assert a.tick()
    g = c.gpunodes["n1"]
    assert g["metadata"]["ownerReferences"][0]["uid"] == "uid-n1"
    assert g["status"]["deviceCount"] == 8 and g["status"]["lastHeartbeatTime"]
    assert c.node_labels["gpu.orchestrator.dev/gpu-count"] == "8"
    assert a.ready()


def test_writes_on_change_at_once_and_otherwise_only_on_the_interval() -> None:
    c, be = FakeClient(), FixtureBackend.load("pcie-4")
    a = Agent("n1", c, be, interval=3600, poll_interval=1)  # type: ignore[arg-type]
    a.tick()
    n = c.status_writes()
    be.update_device(0, {"utilization": {"gpu": 90}})  # load changes wait for the interval
    assert not a.tick() and c.status_writes() == n
    be.mark_unhealthy(3)
    assert a.tick() and c.status_writes() == n + 1
    assert c.gpunodes["n1"]["status"]["devices"][3]["healthy"] is False
    assert c.gpunodes["n1"]["status"]["devices"][0]["utilization"] == 90
    patches_before = len(c.calls)
    assert not a.tick() and len(c.calls) == patches_before
    a.interval = 0.0  # heartbeat due on every tick; labels unchanged, so not re-patched
    assert a.tick() and c.calls[patches_before:] == [("patch", "GPUNode")]


def test_recreates_a_deleted_gpunode_and_retries_after_errors() -> None:
    c, be = FakeClient(), FixtureBackend.load("pcie-4")
    a = Agent("n1", c, be, interval=1, poll_interval=0.01)  # type: ignore[arg-type]
    a.tick()
    a.interval = 0.0  # a heartbeat is due on every tick
    del c.gpunodes["n1"]
    assert a.tick() and "status" in c.gpunodes["n1"]
    c.fail = 1
    assert not a.tick()
    assert a.metrics.reports.labels("error")._value.get() == 1
    assert a.tick()


def test_run_agent_serves_metrics_and_stops_cleanly() -> None:
    c, be = FakeClient(), FixtureBackend.load("a100-ecc-4")
    stop, started = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def on_started(agent: Agent, server: Any) -> None:
        seen["port"] = server.port
        started.set()

    t = threading.Thread(target=run_agent, args=("n1", None, be, 0.2, "127.0.0.1:0", stop),
                         kwargs={"client": c, "on_started": on_started})
    t.start()
    try:
        assert started.wait(10)
        base = f"http://127.0.0.1:{seen['port']}"
        for _ in range(100):
            if c.status_writes():
                break
            threading.Event().wait(0.05)
        body = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        assert urllib.request.urlopen(base + "/readyz", timeout=5).status == 200
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert ('gpu_orchestrator_agent_device_healthy{gpu="2",model="NVIDIA A100-SXM4-80GB",'
            'node="n1",uuid="GPU-7c8d9e0f-1a2b-4c3d-ae4f-5a6b7c8d9e03"} 0.0') in body
    assert 'gpu_orchestrator_agent_device_ecc_errors_total{gpu="2"' in body
    assert 'gpu_orchestrator_agent_device_utilization_ratio{gpu="0"' in body
    assert "gpu_orchestrator_agent_device_power_watts" in body
    assert "gpu_orchestrator_agent_device_temperature_celsius" in body
    assert "gpu_orchestrator_agent_device_memory_used_bytes" in body
    assert 'gpu_orchestrator_agent_reports_total{result="success"}' in body


def test_cli_flags_and_refusals() -> None:
    import argparse

    from internal.agent.cli import add_agent_flags, agent_main

    p = argparse.ArgumentParser()
    add_agent_flags(p)
    args = p.parse_args(["--node-name=n1", "--nvml-backend=fixture:pcie-4", "--interval=5",
                         "--poll-interval=1", "--metrics-bind-address=0"])
    assert (args.node_name, args.interval, args.poll_interval) == ("n1", 5.0, 1.0)
    assert agent_main(p.parse_args(["--node-name="])) == 2
    assert agent_main(p.parse_args(["--node-name=n1", "--nvml-backend=bogus"])) == 1


def test_agent_refuses_to_report_for_a_node_it_does_not_run_on() -> None:
    """Its token is bound to node n2: asked to report for n1, it writes nothing."""
    c, be = FakeClient(), FixtureBackend.load("a100-ecc-4")
    c.token_node = "n2"
    with pytest.raises(WrongNode, match="runs on node 'n2'"):
        run_agent("n1", None, be, 0.2, "0", threading.Event(), client=c)
    assert c.calls == []
