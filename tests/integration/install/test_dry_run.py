"""Every manifest we ship, checked by the API server itself: ``kubectl apply
--dry-run=server --validate=strict`` (schemas, unknown fields, admission) of config/,
config/webhook, the samples, and both charts rendered with their defaults and with
every optional part on. Kinds of CRDs the local control plane does not have
(the Prometheus Operator's, cert-manager's, Argo CD's) are left out and named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hack.testenv import ControlPlane
from tests.integration.install.conftest import ROOT, kustomize, render

FOREIGN_GROUPS = ("monitoring.coreos.com/", "cert-manager.io/")


def dry_run(cp: ControlPlane, objs: list[dict], namespace: str | None = None) -> str:
    objs = [o for o in objs if not o["apiVersion"].startswith(FOREIGN_GROUPS)]
    assert objs
    args = ["apply", "--dry-run=server", "--validate=strict", "-f", "-"]
    if namespace:
        args += ["-n", namespace]
    proc = cp.kubectl(*args, input=json.dumps({"apiVersion": "v1", "kind": "List",
                                               "items": objs}), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    return proc.stdout


def test_config(crds: ControlPlane) -> None:
    out = dry_run(crds, kustomize(ROOT / "config"))
    assert "deployment.apps/gpu-orchestrator-manager" in out
    dry_run(crds, kustomize(ROOT / "config" / "webhook"))


def test_samples(crds: ControlPlane, namespace: str) -> None:
    out = dry_run(crds, kustomize(ROOT / "config" / "samples"), namespace)
    assert out.count("gpuworkload.gpu.orchestrator.dev/") == 7
    import yaml

    sts = [d for d in yaml.safe_load_all(
        (ROOT / "config/samples/gpu-scheduler-check-statefulset.yaml").read_text()) if d]
    dry_run(crds, sts, namespace)


@pytest.mark.parametrize("args", [
    [],
    ["--set", "webhook.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
     "--set", "grafana.dashboard.enabled=true"],
    ["--set", "webhook.enabled=true", "--set", "webhook.certificates.mode=secret",
     "--set", "webhook.certificates.secretName=my-tls", "--set", "webhook.certificates.caBundle="
     "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="],
])
def test_orchestrator_chart(crds: ControlPlane, helm: Path, args: list[str]) -> None:
    dry_run(crds, render(helm, "gpu-orchestrator", *args))


def test_check_chart(crds: ControlPlane, helm: Path, namespace: str) -> None:
    out = dry_run(crds, render(helm, "gpu-scheduler-check", namespace=namespace))
    assert "statefulset.apps/gpu-scheduler-check" in out


def test_dry_run_catches_a_bad_manifest(crds: ControlPlane, helm: Path) -> None:
    """The check can fail: a field the API does not know is refused."""
    objs = render(helm, "gpu-orchestrator")
    dep = next(o for o in objs if o["kind"] == "Deployment")
    dep["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    proc = crds.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                        input=json.dumps(dep), check=False)
    assert proc.returncode != 0
    assert 'unknown field "spec.template.spec.containers[0].imagePulPolicy"' in proc.stderr


def test_make_deploy_overlay(crds: ControlPlane, tmp_path: Path) -> None:
    """``make deploy IMG=...``'s overlay: config/ with the images replaced."""
    import subprocess
    import sys

    img = "registry.example.com:5000/gpu/gpu-orchestrator:0.2.0"
    subprocess.run([sys.executable, "-m", "hack.deploy", "--img", img, "--webhook",
                    "--out", str(tmp_path)], cwd=ROOT, check=True, capture_output=True)
    objs = kustomize(tmp_path)
    images = {c["image"] for o in objs if o["kind"] in ("Deployment", "DaemonSet")
              for c in o["spec"]["template"]["spec"]["containers"]}
    assert images == {img}
    out = dry_run(crds, objs)
    assert "deployment.apps/gpu-orchestrator-webhook" in out
