"""Editing a GPUWorkload on a real kube-apiserver, as a user would: `kubectl scale`
works through the scale subresource, the template and the harmless fields may
change, and every other field's edit is refused with a message that says what to do
instead (api/v1alpha1/changes.py; docs/api.md "Changing a workload")."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from api.v1alpha1 import changes

ROOT = Path(__file__).resolve().parents[3]
API = "/apis/gpu.orchestrator.dev/v1alpha1"
MAP2 = "0=node1:0\n1=node2:0"
REDO = "cannot change while the workload exists; delete and re-create it"


@pytest.fixture(scope="module")
def crds(cluster):
    cluster.kubectl("apply", "-k", str(ROOT / "config" / "crd"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/gpuworkloads.gpu.orchestrator.dev")
    return cluster


def _create(cp, ns: str, name: str, spec: dict, annotations: dict | None = None) -> dict:
    body = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
            "spec": {"template": {"spec": {"containers": [{"name": "main",
                                                            "image": "trainer:v1"}]}},
                     **spec}}
    r = cp.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body), check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _patch(cp, ns: str, name: str, patch: dict):
    return cp.kubectl("patch", "-n", ns, "gw", name, "--type=merge", "-p", json.dumps(patch),
                      check=False)


def _get(cp, ns: str, name: str) -> dict:
    return json.loads(cp.kubectl("get", "-n", ns, "gw", name, "-o", "json").stdout)


def test_kubectl_scale_changes_spec_replicas(crds, namespace) -> None:
    before = _create(crds, namespace, "train", {"replicas": 2, "gpusPerReplica": 4})
    r = crds.kubectl("scale", "-n", namespace, "gw", "train", "--replicas=3", check=False)
    assert r.returncode == 0, r.stderr
    assert "scaled" in r.stdout
    after = _get(crds, namespace, "train")
    assert after["spec"]["replicas"] == 3
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1

    # the scale subresource reads status.replicas and status.selector as the
    # controller writes them
    code, body = crds.api("PATCH", f"{API}/namespaces/{namespace}/gpuworkloads/train/status",
                          {"status": {"replicas": 3,
                                      "selector": "gpu.orchestrator.dev/workload=train"}},
                          content_type="application/merge-patch+json")
    assert code == 200, body
    code, scale = crds.api("GET", f"{API}/namespaces/{namespace}/gpuworkloads/train/scale")
    assert code == 200, scale
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    assert scale["status"] == {"replicas": 3, "selector": "gpu.orchestrator.dev/workload=train"}


def test_scale_of_an_annotation_map_workload_is_refused(crds, namespace) -> None:
    _create(crds, namespace, "seed", {"replicas": 2, "schedulingStrategy": "annotationMap",
                                      "schedulingMap": MAP2})
    r = crds.kubectl("scale", "-n", namespace, "gw", "seed", "--replicas=1", check=False)
    assert r.returncode != 0
    assert "replicas of an annotationMap workload cannot change" in r.stderr
    assert _get(crds, namespace, "seed")["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    ("spec", "patch", "field"),
    [
        ({"gpusPerReplica": 4}, {"gpusPerReplica": 2}, "gpusPerReplica"),
        ({"gpuCount": 4}, {"gpuCount": 2}, "gpusPerReplica"),  # seed spelling, same rule
        ({}, {"minGPUMemoryMiB": 40000}, "minGPUMemoryMiB"),
        ({"priority": "high"}, {"priority": "low"}, "priority"),
        ({"priority": 10}, {"priority": 20}, "priority"),
        ({}, {"schedulingStrategy": "bestFit"}, "schedulingStrategy"),
        ({"replicas": 2, "schedulingStrategy": "annotationMap", "schedulingMap": MAP2},
         {"schedulingMap": "0=node3:0\n1=node4:0"}, "schedulingMap"),
        ({}, {"nodeSelector": {"zone": "east"}}, "nodeSelector"),
        ({}, {"topology": "Required"}, "topology"),
        ({}, {"workloadKind": "Job"}, "workloadKind"),
        ({}, {"deviceExposure": "device-plugin"}, "deviceExposure"),
        ({"deviceExposure": "device-plugin"}, {"deviceExposure": None}, "deviceExposure"),
    ],
)
def test_edit_of_a_fixed_field_is_refused_with_what_to_do(crds, namespace, spec, patch,
                                                           field) -> None:
    before = _create(crds, namespace, "w", spec)
    r = _patch(crds, namespace, "w", {"spec": patch})
    assert r.returncode != 0, f"edit of {patch} was accepted"
    assert f"spec.{field}: Forbidden: {field} {REDO}" in r.stderr
    after = _get(crds, namespace, "w")
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


def test_allowed_edits_are_accepted(crds, namespace) -> None:
    before = _create(crds, namespace, "w", {"gpuCount": 4, "replicas": 2})
    for patch in (
        {"template": {"spec": {"containers": [{"name": "main", "image": "trainer:v2"}]}}},
        {"retryPolicy": {"maxRetries": 1}},
        {"modelName": "llama-3-70b"},
        {"replicas": 1},
        {"gpusPerReplica": 4},  # the same number under its new spelling
    ):
        r = _patch(crds, namespace, "w", {"spec": patch})
        assert r.returncode == 0, f"{patch}: {r.stderr}"
    after = _get(crds, namespace, "w")
    assert after["spec"]["template"]["spec"]["containers"][0]["image"] == "trainer:v2"
    assert after["spec"]["replicas"] == 1 and after["spec"]["gpusPerReplica"] == 4
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 5


def test_scheduling_map_annotation_edit_is_refused(crds, namespace) -> None:
    ann = "gpu-scheduling-map"
    _create(crds, namespace, "seed", {"replicas": 2, "schedulingStrategy": "annotationMap"},
            annotations={ann: MAP2})
    # the admission policy may take a moment to be loaded after it is created
    deadline = time.monotonic() + 30
    while True:
        r = crds.kubectl("annotate", "-n", namespace, "gw", "seed", "--overwrite",
                         f"{ann}=0=node3:0\n1=node4:0", check=False)
        if r.returncode != 0 or time.monotonic() > deadline:
            break
        crds.kubectl("annotate", "-n", namespace, "gw", "seed", "--overwrite", f"{ann}={MAP2}")
        time.sleep(0.5)
    assert r.returncode != 0
    assert changes.ANNOTATION_MESSAGE in r.stderr
    other = crds.kubectl("annotate", "-n", namespace, "gw", "seed", "team=ml", check=False)
    assert other.returncode == 0, other.stderr


def test_bad_priority_names_the_value(crds, namespace) -> None:
    body = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": {"name": "bad", "namespace": namespace},
            "spec": {"priority": "urgent"}}
    r = crds.kubectl("create", "-f", "-", input=json.dumps(body), check=False)
    assert r.returncode != 0
    assert ('spec.priority: Forbidden: priority must be an integer in [0, 1000000000] or one '
            'of low, medium, high, got "urgent"') in r.stderr
    assert 'Invalid value: ""' not in r.stderr
