"""``kubectl gpu submit`` is ``kubectl apply``'s equal where the API server judges:
an unknown field is refused (``fieldValidation=Strict``) instead of silently dropped,
and what the CLI refuses before any request (a map's node that is no Node name, a
device above 999, an image the kubelet cannot parse) kube-apiserver refuses too,
with the CRD's pattern and the admission policy of config/crd."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hack.testenv import ControlPlane
from tests.integration.cli.test_plugin import API, Plugin, crds  # noqa: F401  (fixture)


@pytest.fixture
def gpu(cluster: ControlPlane, capsys: pytest.CaptureFixture[str], crds: None) -> Plugin:  # noqa: F811
    return Plugin(cluster, capsys)


@pytest.fixture
def ns(cluster: ControlPlane) -> Iterator[str]:
    name = f"strict-{uuid.uuid4().hex[:6]}"
    code, body = cluster.api("POST", "/api/v1/namespaces", {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert code == 201, body
    yield name
    cluster.api("DELETE", f"/api/v1/namespaces/{name}")


def workload(name: str, **spec: object) -> dict:
    return {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": {"name": name}, "spec": {"gpusPerReplica": 1, **spec}}


def test_an_unknown_spec_field_is_refused_not_dropped(gpu: Plugin, ns: str,
                                                      cluster: ControlPlane,
                                                      tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text(yaml.safe_dump(workload("typo", podTemplate={"spec": {}})))
    code, out, err = gpu("submit", str(f), "-n", ns, ok=False)
    assert (code, out) == (1, ""), err
    assert err.count("\n") == 1 and 'unknown field "spec.podTemplate"' in err, err
    code, _ = cluster.api("GET", f"{API}/namespaces/{ns}/gpuworkloads/typo")
    assert code == 404, "nothing was created"


@pytest.mark.parametrize(("spec", "words"), [
    ({"schedulingStrategy": "annotationMap", "schedulingMap": "0=Node_1:0"},
     "schedulingMap must be lines of"),
    ({"schedulingStrategy": "annotationMap", "schedulingMap": "0=node1:99999999999"},
     "schedulingMap must be lines of"),
    ({"template": {"spec": {"containers": [{"name": "main", "image": "Foo:Bar"}]}}},
     'every image must be a reference such as registry.example.com/team/image:tag, its '
     'path in lower case (the kubelet would answer InvalidImageName), not "Foo:Bar"'),
])
def test_the_api_server_refuses_what_the_cli_refuses(cluster: ControlPlane, ns: str,
                                                     crds: None, spec: dict,  # noqa: F811
                                                     words: str) -> None:
    code, body = cluster.api("POST", f"{API}/namespaces/{ns}/gpuworkloads",
                             workload("w", **spec))
    assert code == 422, body
    assert words in body["message"], body["message"]


def test_a_good_image_and_map_still_pass(cluster: ControlPlane, ns: str,
                                         crds: None) -> None:  # noqa: F811
    code, body = cluster.api("POST", f"{API}/namespaces/{ns}/gpuworkloads", workload(
        "ok", schedulingStrategy="annotationMap", schedulingMap="0=gpu-1.zone-a:0,7",
        template={"spec": {"containers": [{
            "name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}]}}))
    assert code == 201, body
