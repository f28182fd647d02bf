"""The Grafana dashboard: valid JSON with the panels operators look for, and every
query names only metrics the code exports (manager, framework and agent)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from tests.unit.prometheus.promql import (
    PROMETHEUS_BUILTINS,
    exported_names,
    label_values_metric,
    metric_names,
)

DASHBOARD = Path(__file__).resolve().parents[3] / "config" / "grafana" / "gpu-orchestrator.json"


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(d: dict) -> Iterator[dict]:
    for p in d["panels"]:
        yield p
        yield from p.get("panels") or ()


def queries(d: dict) -> Iterator[tuple[str, str]]:
    for p in panels(d):
        for t in p.get("targets") or ():
            yield p["title"], t["expr"]


def test_dashboard_covers_what_operators_watch() -> None:
    d = load()
    assert d["uid"] == "gpu-orchestrator"
    titles = {p["title"] for p in panels(d)}
    for wanted in ("GPU allocation per node", "Pending workloads",
                   "Placement latency (create to bound)", "Reconciles by result",
                   "Reconcile errors", "Work queue depth"):
        assert wanted in titles
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), "panel ids are unique"


def test_shares_mig_instances_and_holders_are_plotted_per_device() -> None:
    """The shares and MIG instances each device gives out, and a table of who holds
    which device (kubectl gpu nodes' view, over time), each from its own metric."""
    by_title = {p["title"]: p for p in panels(load())}
    for title, metric in (("Shares per device", "gpu_orchestrator_device_shares"),
                          ("Shared device memory taken",
                           "gpu_orchestrator_device_share_allocated_ratio"),
                          ("MIG instances held per device",
                           "gpu_orchestrator_device_mig_instances_allocated"),
                          ("Device holders", "gpu_orchestrator_device_holder")):
        assert title in by_title, title
        exprs = [t["expr"] for t in by_title[title]["targets"]]
        assert any(metric in metric_names(e) for e in exprs), (title, exprs)
    table = by_title["Device holders"]
    assert table["type"] == "table"
    assert all(t.get("instant") and t.get("format") == "table" for t in table["targets"])


def test_every_query_names_an_exported_metric() -> None:
    exported = exported_names() | PROMETHEUS_BUILTINS
    seen: set[str] = set()
    for title, expr in queries(load()):
        names = metric_names(expr)
        assert names, f"{title}: no metric in {expr}"
        assert names <= exported, f"{title}: unknown metrics {sorted(names - exported)}"
        seen |= names
    for var in load()["templating"]["list"]:
        q = var.get("query")
        text = q.get("query") if isinstance(q, dict) else q
        if var["type"] == "query":
            names = label_values_metric(text)
            assert names and names <= exported, var
    # The headline metrics are all on the dashboard.
    for m in ("gpu_orchestrator_node_gpus", "gpu_orchestrator_node_gpus_allocated",
              "gpu_orchestrator_workloads", "gpu_orchestrator_create_to_bound_seconds_bucket",
              "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
              "workqueue_depth", "gpu_orchestrator_device_shares",
              "gpu_orchestrator_device_share_allocated_ratio",
              "gpu_orchestrator_device_mig_instances_allocated",
              "gpu_orchestrator_device_holder"):
        assert m in seen, m
