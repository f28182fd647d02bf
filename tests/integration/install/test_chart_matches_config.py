"""One source of truth: the gpu-orchestrator chart with its default values renders
what ``kubectl kustomize config`` (and config/webhook, its cert-manager component,
config/prometheus) holds, and the gpu-scheduler-check chart renders the seed sample.

Compared per object (kind and name): the whole ``spec`` of workloads, Services, CRDs
and admission objects, the rules, roleRef and subjects of RBAC objects, config/'s
labels (the chart may add its own), the namespace. A change to one side only fails
here with the object and the first difference."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.integration.install.conftest import NS, ROOT, by_key, kustomize, render

# What the chart adds to a default install that config/kustomization.yaml leaves to
# config/prometheus: the metrics Service (harmless without Prometheus).
CHART_ONLY_BY_DEFAULT = {("Service", "gpu-orchestrator-metrics")}
COMPARED = ("spec", "rules", "roleRef", "subjects", "data", "webhooks")


def _diff(a: Any, b: Any, path: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'config' if k in a else 'chart'}"
            d = _diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items in config, {len(b)} in the chart: {a!r} / {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: config {a!r}, chart {b!r}"


def assert_same(config: list[dict], chart: list[dict], chart_only: set = frozenset()) -> None:
    # `helm test`'s pod and its account are the chart's own (config/ has no helm test).
    chart = [o for o in chart
             if (o["metadata"].get("annotations") or {}).get("helm.sh/hook") != "test"]
    want, got = by_key(config), by_key(chart)
    want.pop(("Namespace", NS), None)  # helm install --create-namespace makes it
    assert set(want) == set(got) - set(chart_only), (
        f"only in config: {sorted(set(want) - set(got))}; "
        f"only in the chart: {sorted(set(got) - set(want) - set(chart_only))}")
    for key, c in want.items():
        h = got[key]
        assert c["apiVersion"] == h["apiVersion"], key
        assert c["metadata"].get("namespace") == h["metadata"].get("namespace"), key
        labels = h["metadata"].get("labels") or {}
        for k, v in (c["metadata"].get("labels") or {}).items():
            assert labels.get(k) == v, f"{key}: label {k}={v} missing in the chart"
        for field in COMPARED:
            d = _diff(c.get(field), h.get(field), field)
            assert d is None, f"{key} differs: {d}"


def test_default_install_is_config(helm: Path) -> None:
    assert_same(kustomize(ROOT / "config"), render(helm, "gpu-orchestrator"),
                CHART_ONLY_BY_DEFAULT)


MAP_API = "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"


def test_finalizer_policy_is_config_admission_finalizer_where_the_api_is_served(
        helm: Path) -> None:
    """Installed only on a cluster that serves MutatingAdmissionPolicy (the default
    render, no such API, is config/ without it: the test above)."""
    policy = by_key(kustomize(ROOT / "config" / "admission-finalizer"))
    served = render(helm, "gpu-orchestrator", "--api-versions", MAP_API)
    assert_same(list(policy.values()), [o for o in served
                                        if (o["kind"], o["metadata"]["name"]) in policy])
    assert set(policy) <= set(by_key(served))
    off = render(helm, "gpu-orchestrator", "--api-versions", MAP_API,
                 "--set", "finalizerPolicy.enabled=false")
    assert not set(policy) & set(by_key(off))
    # a manager of some namespaces would leave the finalizer on workloads elsewhere
    namespaced = render(helm, "gpu-orchestrator", "--api-versions", MAP_API,
                        "--set", "manager.namespaces={team-a}")
    assert not set(policy) & set(by_key(namespaced))


def test_webhook_is_config_webhook(helm: Path) -> None:
    chart = [o for o in render(helm, "gpu-orchestrator", "--set", "webhook.enabled=true")
             if (o["kind"], o["metadata"]["name"]) in by_key(kustomize(ROOT / "config/webhook"))]
    assert_same(kustomize(ROOT / "config" / "webhook"), chart)


def test_cert_manager_webhook_is_the_kustomize_component(helm: Path, tmp_path: Path) -> None:
    rel = Path(os.path.relpath(ROOT / "config" / "webhook", tmp_path))
    (tmp_path / "kustomization.yaml").write_text(json.dumps({
        "resources": [str(rel)], "components": [str(rel / "certmanager")]}))
    want = kustomize(tmp_path)
    chart = render(helm, "gpu-orchestrator", "--set", "webhook.enabled=true",
                   "--set", "webhook.certificates.mode=certManager",
                   "--set", "webhook.replicas=2")
    keys = by_key(want)
    assert_same(want, [o for o in chart if (o["kind"], o["metadata"]["name"]) in keys])
    mwc = by_key(chart)[("MutatingWebhookConfiguration", "gpu-orchestrator-mutating-webhook")]
    assert mwc["metadata"]["annotations"] == by_key(want)[
        ("MutatingWebhookConfiguration", "gpu-orchestrator-mutating-webhook")][
        "metadata"]["annotations"]


def test_namespaced_manager_is_config_namespaced(helm: Path) -> None:
    """manager.namespaces renders config/namespaced: the manager's writes bound per
    namespace (its RoleBindings share one name, so objects are keyed by namespace too),
    no cluster-wide binding of them, and --namespaces on the manager."""
    want = kustomize(ROOT / "config" / "namespaced")
    chart = render(helm, "gpu-orchestrator", "--set", "manager.namespaces={team-a,team-b}")

    def key(o: dict) -> tuple[str, str, str]:
        return o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]

    got = {key(o): o for o in chart}
    assert ("ClusterRoleBinding", "", "gpu-orchestrator-manager-children") not in got
    for ns in ("team-a", "team-b"):
        w = next(o for o in want if key(o) == ("RoleBinding", ns,
                                               "gpu-orchestrator-manager-children"))
        assert_same([w], [got[key(w)]])
    keys = by_key(want)
    assert_same([o for o in want if o["kind"] != "RoleBinding" or
                 o["metadata"]["namespace"] == NS],
                [o for o in chart if (o["kind"], o["metadata"]["name"]) in keys
                 and (o["kind"] != "RoleBinding" or o["metadata"]["namespace"] == NS)])


def test_monitoring_is_config_prometheus(helm: Path) -> None:
    want = kustomize(ROOT / "config" / "prometheus")
    keys = by_key(want)
    chart = render(helm, "gpu-orchestrator", "--set", "metrics.serviceMonitor.enabled=true")
    assert_same(want, [o for o in chart if (o["kind"], o["metadata"]["name"]) in keys])


def test_dashboard_configmap_is_config_grafana(helm: Path) -> None:
    chart = by_key(render(helm, "gpu-orchestrator", "--set", "grafana.dashboard.enabled=true"))
    cm = chart[("ConfigMap", "gpu-orchestrator-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["gpu-orchestrator.json"]) == json.loads(
        (ROOT / "config" / "grafana" / "gpu-orchestrator.json").read_text())


def test_check_chart_is_the_seed_sample(helm: Path) -> None:
    want = kustomize_file(ROOT / "config" / "samples" / "gpu-scheduler-check-statefulset.yaml")
    chart = render(helm, "gpu-scheduler-check")
    for o in chart:
        o["metadata"].pop("namespace")  # the sample is applied with -n
    assert_same(want, chart)


def kustomize_file(path: Path) -> list[dict]:
    import yaml

    return [d for d in yaml.safe_load_all(path.read_text()) if d]
