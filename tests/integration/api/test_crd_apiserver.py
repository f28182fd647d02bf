"""The generated CRDs and admission policy on a real kube-apiserver: the seed's
spellings are accepted, defaults applied, and bad specs rejected with the schema's
message."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from api.v1alpha1.types import GPUWorkload

ROOT = Path(__file__).resolve().parents[3]
SEED = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3"


@pytest.fixture(scope="module")
def crds(cluster):
    cluster.kubectl("apply", "-k", str(ROOT / "config" / "crd"))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/gpuworkloads.gpu.orchestrator.dev",
        "crd/gpunodes.gpu.orchestrator.dev",
        "crd/gpuqueues.gpu.orchestrator.dev",
    )
    return cluster


def _create(cp, ns: str, name: str, spec: dict, annotations: dict | None = None):
    body = {
        "apiVersion": "gpu.orchestrator.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
        "spec": spec,
    }
    return cp.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body), check=False)


def test_seed_spellings_accepted_and_defaulted(crds, namespace) -> None:
    r = _create(
        crds,
        namespace,
        "seed",
        {
            "replicas": 5,
            "gpuCount": 1,
            "schedulingStrategy": "annotationMap",
            "priority": "high",
            "modelName": "llama",
            "retryPolicy": {"maxRetries": 3, "backoffSeconds": 5},
        },
        {"gpu-scheduling-map": SEED},
    )
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["spec"]["retryPolicy"]["maxBackoffSeconds"] == 300
    assert obj["spec"]["topology"] == "None" and obj["spec"]["workloadKind"] == "Pod"
    w = GPUWorkload.model_validate(obj)
    assert w.spec.priority == 100 and w.spec.gpus == 1
    assert w.scheduling_map_text() == SEED
    r = _create(crds, namespace, "empty", {})
    assert r.returncode == 0, r.stderr
    # no default: the manager's --default-strategy applies (status.strategy shows it)
    assert "schedulingStrategy" not in json.loads(r.stdout)["spec"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"priority": "urgent"}, "priority must be an integer"),
        ({"replicas": 0}, "should be greater than or equal to 1"),
        ({"schedulingStrategy": "fastest"}, 'Unsupported value: "fastest"'),
        ({"gpuCount": 2, "gpusPerReplica": 3}, "gpuCount and gpusPerReplica must be equal"),
        (
            {
                "replicas": 2,
                "schedulingStrategy": "annotationMap",
                "schedulingMap": "0=node1:0\n2=node2:1",
            },
            "every index in schedulingMap must be < replicas",
        ),
        (
            {"schedulingStrategy": "annotationMap", "schedulingMap": "0=node1"},
            "schedulingMap must be lines of",
        ),
        (
            {"retryPolicy": {"backoffSeconds": 100, "maxBackoffSeconds": 10}},
            "maxBackoffSeconds must be >= backoffSeconds",
        ),
    ],
)
def test_invalid_specs_rejected_with_message(crds, namespace, spec, message) -> None:
    r = _create(crds, namespace, "bad", spec)
    assert r.returncode != 0
    assert message in r.stderr


def test_a_spec_breaking_several_cross_field_rules_hears_each(crds, namespace) -> None:
    """The spec's plain cross-field rules are one CEL rule in the CRD (spec_rules.py):
    a spec breaking one hears exactly its message, as before; one breaking four hears
    all four."""
    r = _create(crds, namespace, "bad", {"gpuCount": 2, "gpusPerReplica": 3})
    assert r.returncode != 0
    assert ('spec: Invalid value: "object": gpuCount and gpusPerReplica must be equal '
            "when both are set\n") in r.stderr
    r = _create(crds, namespace, "bad", {"gpuShare": {"fraction": "0.5"},
                                         "migProfile": "1g.10gb", "gpusPerReplica": 2,
                                         "deviceExposure": "device-plugin"})
    assert r.returncode != 0
    for message in ("gpuShare takes part of one device: gpusPerReplica must be 1",
                    "migProfile takes one MIG instance: gpusPerReplica must be 1",
                    "gpuShare and migProfile cannot be set together",
                    "gpuShare and migProfile need deviceExposure cuda-visible-devices or "
                    "nvidia-visible-devices (device-plugin and dra cannot express a share)"):
        assert message in r.stderr, message


def test_annotation_map_needs_a_map(crds, namespace) -> None:
    # the admission policy (not CRD CEL: it cannot read annotations) may take a
    # moment to be loaded after creation
    deadline = time.monotonic() + 30
    while True:
        r = _create(crds, namespace, "nomap", {"schedulingStrategy": "annotationMap"})
        if r.returncode != 0 or time.monotonic() > deadline:
            break
        crds.kubectl("delete", "-n", namespace, "gw", "nomap", "--wait=false", check=False)
        time.sleep(0.5)
    assert r.returncode != 0
    assert "needs spec.schedulingMap or the gpu-scheduling-map annotation" in r.stderr


def test_status_subresource_and_printer_columns(crds, namespace) -> None:
    assert _create(crds, namespace, "w", {"gpusPerReplica": 2}).returncode == 0
    status = {
        "status": {
            "phase": "Running",
            "message": "1 of 1 replica(s) running",
            "gpus": 2,
            "gpuSummary": "2",
            "nodes": "node1",
            "strategy": "leastLoaded",
            "placements": [{"index": 0, "node": "node1", "devices": [0, 1]}],
            "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled",
                            "message": "placed 1 replica(s) on node1",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }
    }
    crds.kubectl(
        "patch",
        "-n",
        namespace,
        "gw",
        "w",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    out = crds.kubectl("get", "-n", namespace, "gw", "w").stdout
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "PHASE", "REASON", "STRATEGY", "GPUS", "NODES", "AGE"]
    assert row.split()[:6] == ["w", "Running", "Scheduled", "leastLoaded", "2", "node1"]
    wide = crds.kubectl("get", "-n", namespace, "gw", "w", "-o", "wide").stdout
    header, row = wide.splitlines()[:2]
    assert header.split()[-4:] == ["REPLICAS", "MODEL", "AGE", "MESSAGE"], wide
    assert row.endswith("1 of 1 replica(s) running"), row
    # the `-o wide` example of docs/usage.md has the columns kubectl shows
    usage = (ROOT / "docs" / "usage.md").read_text().splitlines()
    example = usage[usage.index("$ kubectl get gw -n ml -o wide") + 1]
    assert example.split() == header.split(), wide
    explain = crds.kubectl("explain", "gpuworkload.spec.gpusPerReplica").stdout
    assert "GPU devices per replica" in explain


def test_gpuqueue_schema_columns_and_explain(crds) -> None:
    """A queue may not lend more than its nominal; ``kubectl get gpuqueues`` shows
    NOMINAL, USED, BORROWED, PENDING; ``kubectl explain`` the field docs."""
    name = f"q-{int(time.time() * 1000) % 10**9}"
    bad = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUQueue",
           "metadata": {"name": name}, "spec": {"nominalGPUs": 8, "lendingLimit": 9}}
    proc = crds.kubectl("apply", "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0 and "lendingLimit cannot exceed nominalGPUs" in proc.stderr
    good = {**bad, "spec": {"nominalGPUs": 8, "cohort": "research"}}
    crds.kubectl("apply", "-f", "-", input=json.dumps(good))
    try:
        crds.kubectl("patch", "gpuqueue", name, "--subresource=status", "--type=merge", "-p",
                     json.dumps({"status": {"usedGPUs": 12.5, "borrowedGPUs": 4.5,
                                            "pendingWorkloads": 2}}))
        header, row = crds.kubectl("get", "gpuqueues", name).stdout.splitlines()[:2]
        assert header.split() == ["NAME", "COHORT", "NOMINAL", "USED", "BORROWED", "PENDING",
                                  "AGE"]
        assert row.split()[:6] == [name, "research", "8", "12.5", "4.5", "2"]
        explain = crds.kubectl("explain", "gpuqueue.spec.nominalGPUs").stdout
        assert "GPUs guaranteed to this queue's workloads" in explain
        # the workload side: spec.queueName cannot change once set
        assert "queueName" in crds.kubectl("explain", "gpuworkload.spec").stdout
    finally:
        crds.kubectl("delete", "gpuqueue", name, check=False)
