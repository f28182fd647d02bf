"""kubectl gpu against the real local control plane. No controller runs here: the
tests write GPUWorkload status (placements, conditions) through the status
subresource the way the controller does, create the children pods on the fake
nodes, and record Events, then read them back through the plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from hack.testenv import ControlPlane
from internal.cli.kube import (
    EXIT_NO_CRD,
    EXIT_NOT_FOUND,
    EXIT_UNREACHABLE,
    CliError,
    Kube,
)
from internal.cli.main import main

API = "/apis/gpu.orchestrator.dev/v1alpha1"
WORKLOAD_LABEL = "gpu.orchestrator.dev/workload"
UNSCHEDULABLE = ("0/4 nodes can place 1 replica x 8 GPUs:\n"
                 "  node1: 2 of 4 GPUs free, need 8\n"
                 "  node2: 2 of 4 GPUs free, need 8\n"
                 "  node3: 3 of 4 GPUs free, need 8\n"
                 "  node4: 4 of 4 GPUs free, need 8")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def crds(cluster: ControlPlane) -> None:
    cluster.kubectl("apply", "-k", "config/crd")
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/gpuworkloads.gpu.orchestrator.dev", "crd/gpunodes.gpu.orchestrator.dev",
                    "crd/gpuqueues.gpu.orchestrator.dev")


class Plugin:
    """Runs ``kubectl gpu`` in-process (main(argv)) and captures its output."""

    def __init__(self, cluster: ControlPlane, capsys: pytest.CaptureFixture[str]) -> None:
        self.kubeconfig = str(cluster.kubeconfig)
        self.capsys = capsys

    def __call__(self, *args: str, ok: bool = True) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main([*args, "--kubeconfig", self.kubeconfig])
        out, err = self.capsys.readouterr()
        if ok:
            assert code == 0, f"kubectl gpu {' '.join(args)} -> {code}\n{out}\n{err}"
        return code, out, err

    def json(self, *args: str) -> dict:
        _, out, _ = self(*args, "-o", "json")
        return json.loads(out)


@pytest.fixture
def gpu(cluster: ControlPlane, capsys: pytest.CaptureFixture[str], crds: None) -> Plugin:
    return Plugin(cluster, capsys)


def create_workload(cluster: ControlPlane, ns: str, name: str, replicas: int, gpus: int,
                    status: dict | None = None, **spec: object) -> dict:
    body = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "gpusPerReplica": gpus, **spec}}
    code, obj = cluster.api("POST", f"{API}/namespaces/{ns}/gpuworkloads", body)
    assert code == 201, obj
    if status is not None:
        code, obj = cluster.api("PATCH", f"{API}/namespaces/{ns}/gpuworkloads/{name}/status",
                                {"status": status},
                                content_type="application/merge-patch+json")
        assert code == 200, obj
    return obj


def create_child(cluster: ControlPlane, ns: str, workload: str, index: int, node: str,
                 devices: list[int]) -> dict:
    dev = ",".join(map(str, devices))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"{workload}-{index}", "namespace": ns,
                        "labels": {WORKLOAD_LABEL: workload},
                        "annotations": {"gpu.orchestrator.dev/devices": dev,
                                        "gpu.orchestrator.dev/node": node}},
           "spec": {"nodeName": node, "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "cuda:fake",
                                    "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": dev}]}]}}
    code, obj = cluster.api("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    assert code == 201, obj
    return obj


def create_event(cluster: ControlPlane, ns: str, obj: dict, reason: str, message: str,
                 type_: str = "Normal", uid: str | None = None) -> None:
    md = obj["metadata"]
    ev = {"apiVersion": "v1", "kind": "Event",
          "metadata": {"generateName": f"{md['name']}.", "namespace": ns},
          "involvedObject": {"apiVersion": "gpu.orchestrator.dev/v1alpha1",
                             "kind": "GPUWorkload", "name": md["name"], "namespace": ns,
                             "uid": uid or md["uid"]},
          "reason": reason, "message": message, "type": type_, "count": 1,
          "firstTimestamp": now(), "lastTimestamp": now(),
          "source": {"component": "gpu-orchestrator"}}
    code, body = cluster.api("POST", f"/api/v1/namespaces/{ns}/events", ev)
    assert code == 201, body


@pytest.fixture(scope="module")
def scenario(cluster: ControlPlane, crds: None) -> Iterator[dict]:
    """One namespace for the module (devices are cluster-wide: two copies of this
    scenario would hold the same devices). train: 2 replicas x 2 GPUs, placed on
    node1:0,1 and node2:2,3, children running. big: 1 x 8 GPUs, Unschedulable with
    per-node reasons and a FailedScheduling event."""
    ns = f"cli-{uuid.uuid4().hex[:8]}"
    code, body = cluster.api("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    assert code == 201, body
    try:
        yield _scenario(cluster, ns)
    finally:
        cluster.api("DELETE", f"/api/v1/namespaces/{ns}")


def _scenario(cluster: ControlPlane, ns: str) -> dict:
    t = now()
    train = create_workload(cluster, ns, "train", 2, 2, status={
        "phase": "Running",
        "placements": [{"index": 0, "node": "node1", "devices": [0, 1]},
                       {"index": 1, "node": "node2", "devices": [2, 3]}],
        "conditions": [{"type": "Scheduled", "status": "True", "reason": "Placed",
                        "message": "placed by leastLoaded", "lastTransitionTime": t}],
        "gpus": 4, "nodes": "node1,node2", "strategy": "leastLoaded"})
    create_child(cluster, ns, "train", 0, "node1", [0, 1])
    create_child(cluster, ns, "train", 1, "node2", [2, 3])
    create_event(cluster, ns, train, "Scheduled", "placed 0=node1:0,1 1=node2:2,3")
    big = create_workload(cluster, ns, "big", 1, 8, schedulingStrategy="bestFit", status={
        "phase": "Pending",
        # the controller's shape: Scheduled=False, reason Unschedulable, per-node lines
        "conditions": [{"type": "Scheduled", "status": "False", "reason": "Unschedulable",
                        "message": UNSCHEDULABLE, "lastTransitionTime": t}],
        "message": "waiting for 8 free GPUs on one node", "retries": 2})
    create_event(cluster, ns, big, "FailedScheduling", "0/4 nodes can place 1 replica x 8 GPUs",
                 "Warning")
    # An event for an earlier object of the same name (another uid) must not show.
    create_event(cluster, ns, big, "Preempted", "stale event of a deleted namesake",
                 "Warning", uid="00000000-0000-0000-0000-000000000000")
    return {"ns": ns, "train": train, "big": big}


def test_status_totals_and_pending(gpu: Plugin, scenario: dict,
                                   cluster: ControlPlane) -> None:
    ns = scenario["ns"]
    data = gpu.json("status", "-n", ns)
    g = data["gpus"]
    assert g["total"] == cluster.nodes * cluster.gpus
    assert g["allocated"] >= 4
    # free: what the controller would offer; unhealthy or stale devices are not free
    assert g["free"] + g["allocated"] <= g["total"]
    assert sum(n["total"] for n in data["nodes"]) == g["total"]
    assert sum(n["free"] for n in data["nodes"]) == g["free"]
    assert data["workloads"].get("Running", 0) >= 1
    pending = {p["name"]: p for p in data["pending"]}
    assert set(pending) == {"big"}, "pending is scoped to -n"
    assert pending["big"]["gpus"] == 8
    assert "node3: 3 of 4 GPUs free, need 8" in pending["big"]["reason"]

    _, out, _ = gpu("status", "-n", ns)
    assert "Allocated:" in out and "Free:" in out
    assert "big" in out and "0/4 nodes can place" in out
    assert "\x1b[" not in out, "no colours when stdout is not a terminal"


def test_nodes_show_devices_held_by_workloads(gpu: Plugin, scenario: dict,
                                              cluster: ControlPlane) -> None:
    ns = scenario["ns"]
    # A GPU pod the controller did not create takes capacity without naming a device.
    code, body = cluster.api("POST", f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": ns},
        "spec": {"nodeName": "node3", "containers": [{
            "name": "c", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    assert code == 201, body
    nodes = {n["name"]: n for n in gpu.json("nodes")["nodes"]}
    dev1 = {d["index"]: d for d in nodes["node1"]["devices"]}
    # (contains: a workload of another test could hold the same device; both show)
    assert f"{ns}/train[0]" in dev1[0]["holder"] and not dev1[0]["free"]
    assert f"{ns}/train[0]" in dev1[1]["holder"]
    dev2 = {d["index"]: d for d in nodes["node2"]["devices"]}
    assert f"{ns}/train[1]" in dev2[3]["holder"]
    assert nodes["node3"]["counted"].get(f"{ns}/pod/other") == 1
    assert nodes["node1"]["source"] == "allocatable"  # no GPUNode: nvidia.com/gpu

    _, out, _ = gpu("nodes", "node1", "node2")
    lines = out.splitlines()
    assert any(ln.split()[:2] == ["node1", "0"] and f"{ns}/train[0]" in ln
               for ln in lines), out
    assert any(ln.split()[:2] == ["node2", "3"] and f"{ns}/train[1]" in ln
               for ln in lines), out
    assert not any(ln.startswith("node3") for ln in lines), "filtered to node1, node2"


def test_nodes_use_gpunode_health(gpu: Plugin, cluster: ControlPlane, crds: None) -> None:
    name = "node4"
    obj = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUNode",
           "metadata": {"name": name}, "spec": {"nodeName": name}}
    code, body = cluster.api("POST", f"{API}/gpunodes", obj)
    assert code in (201, 409), body
    devices = [{"index": i, "uuid": f"GPU-{i}", "model": "NVIDIA H100 80GB HBM3",
                "memoryTotalMiB": 81559, "memoryUsedMiB": 0, "utilization": 0,
                "healthy": i != 2} for i in range(4)]
    code, body = cluster.api("PATCH", f"{API}/gpunodes/{name}/status",
                             {"status": {"devices": devices, "deviceCount": 4,
                                         "healthyCount": 3, "lastHeartbeatTime": now()}},
                             content_type="application/merge-patch+json")
    assert code == 200, body
    try:
        node = gpu.json("nodes", name)["nodes"][0]
        assert node["source"] == "GPUNode" and node["unhealthy"] == 1
        assert node["free"] == 3, "the unhealthy device is not free"
        health = {d["index"]: d["health"] for d in node["devices"]}
        assert health == {0: "Healthy", 1: "Healthy", 2: "Unhealthy", 3: "Healthy"}
        _, out, _ = gpu("nodes", name)
        assert "Unhealthy" in out and "H100" in out
    finally:
        cluster.api("DELETE", f"{API}/gpunodes/{name}")


def test_workloads_with_placements(gpu: Plugin, scenario: dict) -> None:
    ns = scenario["ns"]
    _, out, _ = gpu("workloads", "-n", ns)
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines()[1:] if ln.strip()}
    assert rows["train"][1:5] == ["Running", "leastLoaded", "2", "4"]
    assert "0=node1:0,1 1=node2:2,3" in out
    assert rows["big"][1:5] == ["Pending", "bestFit", "1", "8"]

    _, out_all, _ = gpu("workloads", "-A")
    assert out_all.splitlines()[0].split()[0] == "NAMESPACE"
    assert any(ln.split()[:2] == [ns, "train"] for ln in out_all.splitlines())

    data = gpu.json("workloads", "-n", ns)
    assert data["kind"] == "List"
    by_name = {w["metadata"]["name"]: w for w in data["items"]}
    assert by_name["train"]["status"]["placements"][1] == {
        "index": 1, "node": "node2", "devices": [2, 3]}
    _, out_yaml, _ = gpu("workloads", "-n", ns, "-o", "yaml")
    assert yaml.safe_load(out_yaml)["items"][0]["kind"] == "GPUWorkload"


def test_describe_pending_shows_reasons_and_events(gpu: Plugin, scenario: dict) -> None:
    ns = scenario["ns"]
    _, out, _ = gpu("describe", "big", "-n", ns)
    assert "Why pending:" in out
    for node, free in (("node1", 2), ("node2", 2), ("node3", 3), ("node4", 4)):
        assert f"{node}: {free} of 4 GPUs free, need 8" in out
    assert "FailedScheduling" in out
    assert "stale event of a deleted namesake" not in out, "events are matched by uid"
    assert "Unschedulable" in out and "Scheduled" in out
    assert "bestFit" in out

    data = gpu.json("describe", "big", "-n", ns)
    assert data["pendingReason"] == UNSCHEDULABLE
    assert [e["reason"] for e in data["events"]] == ["FailedScheduling"]


def test_describe_placed_shows_placement_and_pods(gpu: Plugin, scenario: dict) -> None:
    ns = scenario["ns"]
    _, out, _ = gpu("describe", "train", "-n", ns)
    assert "Why pending" not in out
    rows = [ln.split() for ln in out.splitlines()]
    assert ["0", "node1", "0,1", "train-0"] in [r[:4] for r in rows]
    assert ["1", "node2", "2,3", "train-1"] in [r[:4] for r in rows]
    assert "Scheduled" in out and "placed 0=node1:0,1 1=node2:2,3" in out
    data = gpu.json("describe", "train", "-n", ns)
    assert sorted(p["name"] for p in data["pods"]) == ["train-0", "train-1"]
    assert {p["devices"] for p in data["pods"]} == {"0,1", "2,3"}


def test_submit_creates_workload(gpu: Plugin, cluster: ControlPlane, namespace: str,
                                 tmp_path: Path) -> None:
    # The template is a valid starting point: submit it as it is printed.
    _, text, _ = gpu("template", "--name", "from-template", "--replicas", "2", "--gpus", "2",
                     "--strategy", "roundRobin")
    f = tmp_path / "w.yaml"
    f.write_text(text)
    _, out, _ = gpu("submit", str(f), "-n", namespace)
    assert f"from-template created in namespace {namespace}" in out
    code, obj = cluster.api("GET", f"{API}/namespaces/{namespace}/gpuworkloads/from-template")
    assert code == 200, obj
    assert obj["spec"]["replicas"] == 2 and obj["spec"]["gpusPerReplica"] == 2
    assert obj["spec"]["schedulingStrategy"] == "roundRobin"
    assert obj["spec"]["priority"] == "medium"

    # Submitting it again: the API server's AlreadyExists, as a plain error.
    code, _, err = gpu("submit", str(f), "-n", namespace, ok=False)
    assert code == 1 and "already exists" in err

    # A typo is caught client-side with the field named, before any API call.
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("replicas: 2", "replicas: 0").replace("from-template", "bad"))
    code, _, err = gpu("submit", str(bad), "-n", namespace, ok=False)
    assert code == 1 and "spec.replicas" in err
    assert cluster.api("GET", f"{API}/namespaces/{namespace}/gpuworkloads/bad")[0] == 404


def test_watch_prints_changes(gpu: Plugin, scenario: dict) -> None:
    ns = scenario["ns"]
    _, out, _ = gpu("watch", "-n", ns, "--timeout", "1")
    lines = out.splitlines()
    assert any("EXISTING" in ln and "train" in ln and "Running" in ln for ln in lines), out
    assert any("big" in ln and "Pending" in ln and "0/4 nodes" in ln for ln in lines), out


def test_not_found_exit_code(gpu: Plugin, namespace: str) -> None:
    code, out, err = gpu("describe", "does-not-exist", "-n", namespace, ok=False)
    assert code == EXIT_NOT_FOUND
    assert out == ""
    assert err.startswith("error: ") and "does-not-exist" in err and "not found" in err
    assert "Traceback" not in err


def test_no_cluster_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bogus = tmp_path / "kubeconfig"
    bogus.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    code = main(["status", "--kubeconfig", str(bogus)])
    _, err = capsys.readouterr()
    assert code == EXIT_UNREACHABLE
    assert "cannot reach the Kubernetes API server at https://127.0.0.1:1" in err
    code = main(["nodes", "--kubeconfig", str(tmp_path / "missing")])
    _, err = capsys.readouterr()
    assert code == EXIT_UNREACHABLE and "cannot load kubeconfig" in err


def test_crd_missing_error(cluster: ControlPlane) -> None:
    # The shared CRD cannot be deleted under other tests; the check the commands run
    # first (discovery of the kind) is exercised against a group the server lacks.
    kube = Kube.connect(str(cluster.kubeconfig), None)
    with pytest.raises(CliError) as exc:
        kube.require_kind("absent.example.com/v1", "Widget")
    assert exc.value.code == EXIT_NO_CRD
    assert "widgets.absent.example.com is not installed" in exc.value.message


def test_installed_as_kubectl_plugin(cluster: ControlPlane, scenario: dict) -> None:
    """`kubectl gpu` finds the kubectl-gpu console script on PATH."""
    bindir = Path(sys.executable).parent
    if not (bindir / "kubectl-gpu").exists():
        pytest.fail(f"kubectl-gpu is not installed in {bindir}: pip install -e .")
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(cluster.kubeconfig)}
    proc = subprocess.run(["kubectl", "gpu", "workloads", "-n", scenario["ns"], "-o", "json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    names = {w["metadata"]["name"] for w in json.loads(proc.stdout)["items"]}
    assert names == {"train", "big"}
