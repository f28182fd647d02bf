"""deploy/argocd: structure only (no Argo CD runs here; deploy/argocd/README.md says
so). The ApplicationSet and AppProject have the fields Argo CD requires, every
generated application points at a chart that exists, and the project lets through
the repository, the destinations and every kind the charts render."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.integration.install.conftest import ROOT, render

ARGO = ROOT / "deploy" / "argocd"


def _load(name: str) -> dict:
    docs = [d for d in yaml.safe_load_all((ARGO / name).read_text()) if d]
    assert len(docs) == 1
    return docs[0]


def _elements(appset: dict) -> list[dict]:
    gens = appset["spec"]["generators"][0]["matrix"]["generators"]
    assert "clusters" in gens[0]
    return gens[1]["list"]["elements"]


def test_required_fields() -> None:
    proj, appset = _load("appproject.yaml"), _load("applicationset.yaml")
    for doc, kind in ((proj, "AppProject"), (appset, "ApplicationSet")):
        assert doc["apiVersion"] == "argoproj.io/v1alpha1"
        assert doc["kind"] == kind
        assert doc["metadata"]["name"] and doc["metadata"]["namespace"] == "argocd"
    tmpl = appset["spec"]["template"]
    assert tmpl["metadata"]["name"]
    spec = tmpl["spec"]
    assert spec["project"] == proj["metadata"]["name"]
    for field in ("repoURL", "targetRevision", "path"):
        assert spec["source"][field], field
    assert spec["destination"]["server"] and spec["destination"]["namespace"]
    assert appset["spec"]["goTemplate"] is True


def test_every_application_is_an_existing_chart_the_project_allows(helm: Path) -> None:
    proj, appset = _load("appproject.yaml"), _load("applicationset.yaml")
    spec = appset["spec"]["template"]["spec"]
    assert spec["source"]["repoURL"] in proj["spec"]["sourceRepos"]
    allowed_ns = {d["namespace"] for d in proj["spec"]["destinations"]}
    cluster_ok = {(k["group"], k["kind"]) for k in proj["spec"]["clusterResourceWhitelist"]}
    ns_ok = {(k["group"], k["kind"]) for k in proj["spec"]["namespaceResourceWhitelist"]}
    elements = _elements(appset)
    assert {e["chart"] for e in elements} == {"gpu-orchestrator", "gpu-scheduler-check"}
    for e in elements:
        path = spec["source"]["path"].replace("{{ .chart }}", e["chart"])
        assert (ROOT / path / "Chart.yaml").exists(), path
        assert e["namespace"] in allowed_ns
        values = yaml.safe_load(e["values"])
        args = [a for k, v in _flat(values) for a in ("--set", f"{k}={v}")]
        # Every kind the application would apply, with everything optional on.
        extra = ["--set", "metrics.serviceMonitor.enabled=true",
                 "--set", "grafana.dashboard.enabled=true"] if e["chart"] == "gpu-orchestrator" \
            else []
        for obj in render(helm, e["chart"], *args, *extra, namespace=e["namespace"]):
            if (obj["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test":
                continue  # `helm test`'s pod and account: Argo CD ignores test hooks
            group = obj["apiVersion"].rpartition("/")[0]
            key = (group, obj["kind"])
            if "namespace" in obj["metadata"]:
                assert key in ns_ok, f"{e['chart']}: {key} not in namespaceResourceWhitelist"
                assert obj["metadata"]["namespace"] == e["namespace"]
            else:
                assert key in cluster_ok, f"{e['chart']}: {key} not in clusterResourceWhitelist"


def _flat(values: dict, prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for k, v in values.items():
        if isinstance(v, dict):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", str(v).lower() if isinstance(v, bool) else v))
    return out


def test_cert_manager_kinds_are_allowed(helm: Path) -> None:
    proj = _load("appproject.yaml")
    ns_ok = {(k["group"], k["kind"]) for k in proj["spec"]["namespaceResourceWhitelist"]}
    objs = render(helm, "gpu-orchestrator", "--set", "webhook.enabled=true",
                  "--set", "webhook.certificates.mode=certManager")
    kinds = {(o["apiVersion"].rpartition("/")[0], o["kind"]) for o in objs
             if o["apiVersion"].startswith("cert-manager.io/")}
    assert kinds == {("cert-manager.io", "Issuer"), ("cert-manager.io", "Certificate")}
    assert kinds <= ns_ok
