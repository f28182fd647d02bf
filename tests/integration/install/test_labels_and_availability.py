"""What a cluster operator relies on in the shipped manifests: the standard
``app.kubernetes.io/`` labels on every object (config/ and both charts), and, for the
two-replica manager and webhook, a PodDisruptionBudget, spread over nodes and a
priority class, each a chart value that can be changed or switched off."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.install.conftest import ROOT, by_key, kustomize, render, run_helm

STANDARD = ("app.kubernetes.io/name", "app.kubernetes.io/component", "app.kubernetes.io/part-of")
HELM = (*STANDARD, "app.kubernetes.io/instance", "app.kubernetes.io/managed-by",
        "app.kubernetes.io/version", "helm.sh/chart")
ALL_ON = ["--set", "webhook.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
          "--set", "grafana.dashboard.enabled=true"]


def unlabelled(objs: list[dict], keys: tuple[str, ...]) -> list[str]:
    return [f"{o['kind']}/{o['metadata']['name']}: {[k for k in keys if k not in labels]}"
            for o in objs
            if not all(k in (labels := o["metadata"].get("labels") or {}) for k in keys)]


@pytest.mark.parametrize("path", ["config", "config/webhook", "config/prometheus",
                                  "config/namespaced", "config/samples",
                                  "config/samples/monitoring", "config/admission-finalizer"])
def test_every_config_object_has_the_standard_labels(path: str) -> None:
    objs = kustomize(ROOT / path)
    assert objs and unlabelled(objs, STANDARD) == []
    assert {o["metadata"]["labels"]["app.kubernetes.io/part-of"] for o in objs} == {
        "gpu-orchestrator"}


@pytest.mark.parametrize(("chart", "args"), [
    ("gpu-orchestrator", []), ("gpu-orchestrator", ALL_ON),
    ("gpu-orchestrator", ["--set", "webhook.enabled=true",
                          "--set", "webhook.certificates.mode=certManager"]),
    ("gpu-orchestrator", ["--set", "manager.namespaces={team-a}"]),
    ("gpu-scheduler-check", []),
])
def test_every_chart_object_has_the_standard_labels(helm: Path, chart: str,
                                                    args: list[str]) -> None:
    objs = render(helm, chart, *args)
    assert unlabelled(objs, HELM) == []
    assert {o["metadata"]["labels"]["app.kubernetes.io/instance"] for o in objs} == {"gpu"}
    assert {o["metadata"]["labels"]["app.kubernetes.io/managed-by"] for o in objs} == {"Helm"}


def test_the_two_replica_deployments_have_a_budget_spread_and_priority(helm: Path) -> None:
    objs = by_key(render(helm, "gpu-orchestrator", *ALL_ON))
    for name in ("gpu-orchestrator-manager", "gpu-orchestrator-webhook"):
        dep = objs[("Deployment", name)]
        pod = dep["spec"]["template"]
        pdb = objs[("PodDisruptionBudget", name)]
        assert dep["spec"]["replicas"] == 2
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        # The budget and the spread count this Deployment's pods, and only them.
        assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
        (spread,) = pod["spec"]["topologySpreadConstraints"]
        assert spread["topologyKey"] == "kubernetes.io/hostname"
        assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
        assert spread["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    # The certificate Job is neither critical nor spread.
    job = objs[("Job", "gpu-orchestrator-webhook-certs")]["spec"]["template"]["spec"]
    assert "priorityClassName" not in job and "topologySpreadConstraints" not in job


def test_the_values_change_or_switch_them_off(helm: Path) -> None:
    objs = by_key(render(helm, "gpu-orchestrator", "--set", "webhook.enabled=true",
                         "--set", "manager.podDisruptionBudget.enabled=false",
                         "--set", "webhook.podDisruptionBudget.maxUnavailable=50%",
                         "--set", "manager.priorityClassName=",
                         "--set", "manager.topologySpreadConstraints=null"))
    assert ("PodDisruptionBudget", "gpu-orchestrator-manager") not in objs
    assert objs[("PodDisruptionBudget", "gpu-orchestrator-webhook")]["spec"][
        "maxUnavailable"] == "50%"
    spec = objs[("Deployment", "gpu-orchestrator-manager")]["spec"]["template"]["spec"]
    assert "priorityClassName" not in spec and "topologySpreadConstraints" not in spec


@pytest.mark.parametrize("value", ["0", "-1", "150%", "many"])
def test_a_budget_that_means_nothing_is_refused(helm: Path, value: str) -> None:
    proc = run_helm(helm, "template", "gpu", str(ROOT / "charts" / "gpu-orchestrator"),
                    "--set-string" if not value.lstrip("-").isdigit() else "--set",
                    f"manager.podDisruptionBudget.maxUnavailable={value}", check=False)
    assert proc.returncode != 0
    assert "maxUnavailable" in proc.stderr, proc.stderr
