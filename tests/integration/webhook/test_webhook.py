"""The mutating webhook, called by the real kube-apiserver by URL on 127.0.0.1, with
the selectors and policies of config/webhook (its CA bundle patched in by itself)."""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.testenv import ControlPlane
from internal.webhook import Webhook
from tests.integration.webhook.helpers import (
    MWC_PATH,
    ROOT,
    SEED,
    create,
    env_of,
    pod,
    running_webhook,
)
from tests.waiting import eventually

MAP = {"gpu-scheduling-map": SEED}
ARTIFACTS = ROOT / "tests" / "artifacts"


@pytest.fixture(scope="module")
def running(cluster: ControlPlane,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Webhook, str]]:
    with running_webhook(cluster, tmp_path_factory.mktemp("webhook-certs")) as (hook, name):
        probe = pod("probe-0", annotations=MAP)

        def mutated() -> bool:
            code, body = cluster.api("POST", "/api/v1/namespaces/default/pods?dryRun=All",
                                     probe)
            return code == 201 and env_of(body) == [
                {"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0,1"}]

        eventually(mutated, timeout=30, what="the webhook answers kube-apiserver")
        yield hook, name


@pytest.fixture
def webhook(running: tuple[Webhook, str]) -> str:
    """The name of the registered, answering webhook configuration."""
    return running[1]


@pytest.fixture
def webhook_server(running: tuple[Webhook, str]) -> Webhook:
    return running[0]


def test_ca_bundle_is_patched_in(cluster: ControlPlane, webhook: str) -> None:
    code, cfg = cluster.api("GET", f"{MWC_PATH}/{webhook}")
    assert code == 200
    assert all(h["clientConfig"].get("caBundle") for h in cfg["webhooks"])


def test_replica_2_gets_its_three_devices(cluster: ControlPlane, webhook: str,
                                          namespace: str) -> None:
    obj = pod("anything", annotations=MAP, containers=2,
              labels={"apps.kubernetes.io/pod-index": "2"})
    out = create(cluster, namespace, obj)
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout)
    assert env_of(created) == [
        {"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0,1,2"}] * 2
    assert created["metadata"]["annotations"]["gpu.orchestrator.dev/devices"] == "0,1,2"


def test_statefulset_pods_get_the_devices_the_map_names(cluster: ControlPlane, webhook: str,
                                                        namespace: str) -> None:
    sample = ROOT / "config" / "samples" / "gpu-scheduler-check-statefulset.yaml"
    cluster.kubectl("apply", "-n", namespace, "-f", str(sample))
    want = {f"gpu-scheduler-check-{i}": d
            for i, d in enumerate(["0,1", "2", "0,1,2", "3", "3"])}

    def pods() -> dict[str, str] | None:
        code, body = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods")
        got = {p["metadata"]["name"]: env_of(p)[0].get("CUDA_VISIBLE_DEVICES")
               for p in body.get("items", [])} if code == 200 else {}
        return got if len(got) == 5 else None

    got = eventually(pods, timeout=60, what="5 StatefulSet pods")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "webhook-statefulset-pods.txt").write_text(
        cluster.kubectl("get", "pod", "-n", namespace, "-o", "wide").stdout
        + "\n" + json.dumps(got, indent=2) + "\n")
    assert got == want


def test_readmission_is_idempotent_and_a_user_value_is_replaced_with_a_warning(
        cluster: ControlPlane, webhook: str, namespace: str) -> None:
    obj = pod("check-3", annotations=MAP, env=[
        {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3"}, {"name": "A", "value": "a"}])
    out = create(cluster, namespace, obj)
    assert out.returncode == 0, out.stderr
    assert "Warning:" in out.stderr and "replaced CUDA_VISIBLE_DEVICES=0,1,2,3 with 3" in (
        out.stderr)
    first = json.loads(out.stdout)
    assert first["spec"]["containers"][0]["env"] == [
        {"name": "CUDA_VISIBLE_DEVICES", "value": "3"}, {"name": "A", "value": "a"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    # Re-created from its own output (as `kubectl get -o yaml | kubectl replace
    # --force` does): one entry, no warning.
    cluster.kubectl("delete", "pod", "-n", namespace, "check-3", "--wait=false")
    eventually(lambda: cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/check-3")[0]
               == 404, what="pod deleted")
    again = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {k: first["metadata"][k] for k in ("name", "annotations", "labels")
                          if k in first["metadata"]},
             "spec": first["spec"]}
    out = create(cluster, namespace, again)
    assert out.returncode == 0, out.stderr
    assert "Warning:" not in out.stderr
    assert json.loads(out.stdout)["spec"]["containers"][0]["env"] == first["spec"][
        "containers"][0]["env"]


def test_malformed_map_is_rejected_naming_the_line(cluster: ControlPlane, webhook: str,
                                                   namespace: str) -> None:
    bad = {"gpu-scheduling-map": "0=node1:0,1\n1=node2:x\n"}
    out = create(cluster, namespace, pod("check-0", annotations=bad))
    assert out.returncode != 0
    assert "denied the request" in out.stderr
    assert "line 2" in out.stderr and "'x'" in out.stderr, out.stderr


def test_index_missing_from_the_map_is_admitted_unchanged_with_a_warning(
        cluster: ControlPlane, webhook: str, namespace: str) -> None:
    out = create(cluster, namespace, pod("check-7", annotations=MAP))
    assert out.returncode == 0, out.stderr
    assert "Warning:" in out.stderr and "replica 7" in out.stderr
    created = json.loads(out.stdout)
    assert env_of(created) == [{}]
    assert "gpu.orchestrator.dev/devices" not in created["metadata"]["annotations"]


def test_system_namespaces_are_untouched(cluster: ControlPlane, webhook: str) -> None:
    name = "gpu-webhook-test-system-1"
    out = create(cluster, "kube-system", pod(name, annotations=MAP))
    try:
        assert out.returncode == 0, out.stderr
        assert env_of(json.loads(out.stdout)) == [{}]
    finally:
        cluster.api("DELETE", f"/api/v1/namespaces/kube-system/pods/{name}")


def test_opted_out_pods_are_untouched(cluster: ControlPlane, webhook: str,
                                      namespace: str) -> None:
    obj = pod("check-1", annotations=MAP, labels={"gpu.orchestrator.dev/skip-webhook": "true"})
    out = create(cluster, namespace, obj)
    assert out.returncode == 0, out.stderr
    assert env_of(json.loads(out.stdout)) == [{}]


def test_healthz(webhook_server: Webhook, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(webhook_server.certs.ca_bundle() or b"")
    ctx = ssl.create_default_context(cafile=str(ca))
    url = f"https://127.0.0.1:{webhook_server.server.port}/healthz"
    with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
        assert (resp.status, resp.read()) == (200, b"ok")


@pytest.mark.parametrize("spec", [{"nodeName": "node1"}, {"schedulerName": "default-scheduler"}])
def test_a_pod_the_scheduler_will_not_bind_gets_no_devices(
        cluster: ControlPlane, webhook: str, namespace: str, spec: dict) -> None:
    """Attack 5: a pod that binds itself (or is another scheduler's) is left alone,
    with a warning, through the real API server."""
    obj = pod("check-0", annotations=MAP)
    obj["spec"].update(spec)
    out = create(cluster, namespace, obj)
    assert out.returncode == 0, out.stderr
    assert env_of(json.loads(out.stdout)) == [{}]
    assert "no devices injected" in out.stderr


def test_a_map_on_a_statefulsets_own_metadata_is_created_with_a_warning_naming_the_template(
        cluster: ControlPlane, webhook: str, namespace: str) -> None:
    """kubectl prints the webhook's warning for the seed user's slip (the map on the
    StatefulSet's metadata, where its pods never see it); with the map on the
    template, no such warning."""
    labels = {"app": "slip"}
    template = {"metadata": {"labels": labels},
                "spec": {"schedulerName": "gpu-scheduler", "containers": [
                    {"name": "c", "image": "gpu-scheduler-check:latest"}]}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "slip", "annotations": MAP},
           "spec": {"serviceName": "slip", "replicas": 0,
                    "selector": {"matchLabels": labels}, "template": template}}
    out = create(cluster, namespace, sts)
    assert out.returncode == 0, out.stderr
    assert "Warning:" in out.stderr, out.stderr
    assert "move it to spec.template.metadata.annotations" in out.stderr, out.stderr
    fixed = json.loads(json.dumps(sts))
    fixed["metadata"]["name"] = "fixed"
    fixed["spec"]["template"]["metadata"]["annotations"] = MAP
    out = create(cluster, namespace, fixed)
    assert out.returncode == 0 and "spec.template" not in out.stderr, out.stderr
