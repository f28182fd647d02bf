"""The alerting rules: promtool checks and unit-tests them (config/prometheus/
rules_test.yaml), every alert has its tests, annotations and runbook, the
PrometheusRule carries the same rules, and every expression names exported metrics.

promtool comes from Debian's prometheus package (hack/install-tools.sh). Under CI
(CI=true) a missing promtool fails the tests; elsewhere they skip with the reason."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hack import prometheusrule
from tests.unit.prometheus.promql import PROMETHEUS_BUILTINS, exported_names, metric_names

ROOT = Path(__file__).resolve().parents[3]
PROM = ROOT / "config" / "prometheus"
RULES = PROM / "rules.yaml"
RULES_TEST = PROM / "rules_test.yaml"
ALERTS_DOC = ROOT / "docs" / "alerts.md"


def promtool() -> str:
    path = shutil.which("promtool")
    if path:
        return path
    msg = "promtool not found on PATH: run hack/install-tools.sh (Debian package prometheus)"
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(msg)
    pytest.skip(msg)


def alerts() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def test_promtool_check_rules() -> None:
    proc = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in proc.stdout + proc.stderr


def test_promtool_test_rules() -> None:
    proc = subprocess.run([promtool(), "test", "rules", str(RULES_TEST)], capture_output=True,
                          text=True, timeout=120, cwd=PROM)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_the_alerts_the_platform_team_needs() -> None:
    assert {a["alert"] for a in alerts()} == {
        "GPUWorkloadsPendingTooLong", "GPUPlacementFailuresRising",
        "GPUOrchestratorReconcileErrors", "GPUOrchestratorWorkQueueBackingUp",
        "GPUsExhaustedOnAllNodes", "GPUNodeHeartbeatStale", "GPUOrchestratorDown",
        "GPUOrchestratorNoLeader", "GPUWorkloadsUnmanaged",
        "GPUOrchestratorLostRequeue", "GPUQueueWorkloadsWaiting", "GPUDevicesDoubleBooked"}


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    doc = yaml.safe_load(RULES_TEST.read_text())
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in doc["tests"]:
        for t in case.get("alert_rule_test") or ():
            (fired if t.get("exp_alerts") else quiet).add(t["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - fired == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested not firing"


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def test_every_alert_has_summary_description_and_runbook() -> None:
    doc = ALERTS_DOC.read_text()
    anchors = {_anchor(m) for m in re.findall(r"^#{2,3} (.+)$", doc, flags=re.M)}
    for a in alerts():
        ann = a.get("annotations") or {}
        assert ann.get("summary"), a["alert"]
        assert ann.get("description"), a["alert"]
        assert a.get("labels", {}).get("severity") in ("warning", "critical"), a["alert"]
        url = ann.get("runbook_url", "")
        assert url.split("#")[0].endswith("docs/alerts.md"), url
        assert url.split("#")[-1] in anchors, f"{a['alert']}: no section {url} in docs/alerts.md"


def test_prometheusrule_carries_the_same_rules() -> None:
    rules = yaml.safe_load(RULES.read_text())
    pr = yaml.safe_load((PROM / "prometheusrule.yaml").read_text())
    assert pr["apiVersion"] == "monitoring.coreos.com/v1" and pr["kind"] == "PrometheusRule"
    assert pr["spec"]["groups"] == rules["groups"]
    assert (PROM / "prometheusrule.yaml").read_text() == prometheusrule.render(), (
        "config/prometheus/prometheusrule.yaml is stale: python -m hack.prometheusrule")


def test_kustomization_lists_the_monitoring_objects() -> None:
    k = yaml.safe_load((PROM / "kustomization.yaml").read_text())
    kinds = {yaml.safe_load((PROM / r).read_text())["kind"] for r in k["resources"]}
    assert kinds == {"Service", "ServiceMonitor", "PodMonitor", "PrometheusRule"}
    top = yaml.safe_load((ROOT / "config" / "kustomization.yaml").read_text())
    assert "prometheus" not in (top.get("resources") or []), (
        "config/prometheus needs the Prometheus Operator CRDs: keep it out of config/")
    svc = yaml.safe_load((PROM / "service.yaml").read_text())
    sm = yaml.safe_load((PROM / "servicemonitor.yaml").read_text())
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] in {p["name"] for p in svc["spec"]["ports"]}
    # The alerts select job=<the Service name>, the job the Operator gives the target.
    assert all(f'job="{svc["metadata"]["name"]}"' in a["expr"] for a in alerts())


def test_alerts_name_only_exported_metrics() -> None:
    exported = exported_names() | PROMETHEUS_BUILTINS
    for a in alerts():
        names = metric_names(a["expr"])
        assert names, a["alert"]
        assert names <= exported, f"{a['alert']}: unknown metrics {sorted(names - exported)}"


def test_metric_name_parser() -> None:
    assert metric_names(
        'histogram_quantile(0.99, sum by (name, le) (rate(workqueue_queue_duration_seconds_bucket'
        '{job="x",le!="+Inf"}[5m]))) > 60 or max by (name) (workqueue_depth) > 1'
    ) == {"workqueue_queue_duration_seconds_bucket", "workqueue_depth"}
    assert metric_names('absent(up{job="a"} == 1)') == {"up"}
    assert metric_names("sum(x{node=~\"$node\"}[$__rate_interval]) / ignoring(a) y") == {"x", "y"}


def test_the_pod_monitor_scrapes_the_agents() -> None:
    """The dashboard's per-device panels plot the agents' series: the PodMonitor must
    select the agent's pods, in its namespace, on the port that serves /metrics."""
    pm = yaml.safe_load((PROM / "podmonitor.yaml").read_text())
    ds = yaml.safe_load((ROOT / "config" / "agent" / "daemonset.yaml").read_text())
    pod = ds["spec"]["template"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pm["spec"]["namespaceSelector"]["matchNames"] == [ds["metadata"]["namespace"]]
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] in ports
    assert str(ports[endpoint["port"]]) == pod["metadata"]["annotations"]["prometheus.io/port"]
