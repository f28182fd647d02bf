"""Writes config/grafana/gpu-orchestrator.json (the Grafana dashboard).

    python -m hack.grafana_dashboard

The JSON is committed; this script is how it is edited. tests/unit/prometheus checks
that every query names only metrics the code exports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "config" / "grafana" / "gpu-orchestrator.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
J = 'job=~"$job"'
RI = "$__rate_interval"

_id = 0


def _next_id() -> int:
    global _id
    _id += 1
    return _id


def target(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> dict:
    t: dict[str, Any] = {"datasource": DS, "expr": expr, "legendFormat": legend or "__auto",
                         "refId": ref, "range": not instant}
    if instant:
        t["instant"] = True
    return t


def panel(kind: str, title: str, desc: str, targets: list[dict], x: int, y: int, w: int,
          h: int, unit: str = "short", **extra: Any) -> dict:
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    p = {"id": _next_id(), "type": kind, "title": title, "description": desc,
         "datasource": DS, "gridPos": {"x": x, "y": y, "w": w, "h": h},
         "targets": targets,
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
         "options": {}}
    if kind == "timeseries":
        p["options"] = {"legend": {"displayMode": "table", "placement": "right",
                                   "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}}
    p.update(extra)
    return p


def row(title: str, y: int) -> dict:
    return {"id": _next_id(), "type": "row", "title": title, "collapsed": False,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []}


def stat(title: str, desc: str, expr: str, x: int, y: int, unit: str = "short",
         thresholds: list[dict] | None = None) -> dict:
    p = panel("stat", title, desc, [target(expr, instant=True)], x, y, 4, 4, unit)
    p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "background",
                    "graphMode": "none"}
    p["fieldConfig"]["defaults"]["thresholds"] = {
        "mode": "absolute",
        "steps": thresholds or [{"color": "green", "value": None}]}
    return p


def quantiles(metric: str, by: str, legend_prefix: str) -> list[dict]:
    grp = f"le, {by}" if by else "le"
    return [target(f"histogram_quantile({q}, sum by ({grp}) (rate({metric}_bucket{{{J}}}"
                   f"[{RI}])))", f"{legend_prefix}p{int(q * 100)}")
            for q in (0.5, 0.9, 0.99)]


def shared_devices(panels: list[dict], y: int) -> int:
    """The row of what each device gives out (shares, MIG instances) and who holds it;
    returns the next free y."""
    nd = f'{J},node=~"$node"'
    panels.append(row("Shares, MIG instances and holders per device", y))
    y += 1
    panels += [
        panel("timeseries", "Shares per device",
              "gpuShare holders on each shared device (kubectl gpu nodes: N shares).",
              [target(f"max by (node, device) (gpu_orchestrator_device_shares{{{nd}}})",
                      "{{node}}:{{device}}")], 0, y, 8, 8),
        panel("timeseries", "Shared device memory taken",
              "Part of each shared device its shares take (memory shares by the device's "
              "reported memory, fractions as given); never above 1.",
              [target("max by (node, device) (gpu_orchestrator_device_share_allocated_ratio"
                      f"{{{nd}}})", "{{node}}:{{device}}")], 8, y, 8, 8, "percentunit"),
        panel("timeseries", "MIG instances held per device",
              "MIG instances of each MIG-enabled device held by migProfile workloads.",
              [target("max by (node, device) ("
                      f"gpu_orchestrator_device_mig_instances_allocated{{{nd}}})",
                      "{{node}}:{{device}}")], 16, y, 8, 8),
    ]
    y += 8
    holders = panel(
        "table", "Device holders",
        "Who holds each device held by name, and how (whole, share, mig): a workload "
        "ns/name, or a pod, Job or claim as kubectl gpu nodes names it.",
        [target(f"max by (node, device, holder, kind) (gpu_orchestrator_device_holder{{{nd}}})",
                instant=True)], 0, y, 24, 10)
    holders["targets"][0]["format"] = "table"
    holders["transformations"] = [{"id": "organize", "options": {
        "excludeByName": {"Time": True, "Value": True},
        "indexByName": {"node": 0, "device": 1, "holder": 2, "kind": 3}}}]
    holders["options"] = {"showHeader": True,
                          "sortBy": [{"displayName": "node"}, {"displayName": "device"}]}
    panels.append(holders)
    return y + 10


def build() -> dict:
    panels: list[dict] = []
    y = 0
    panels.append(row("GPU allocation", y))
    y += 1
    total = f"sum(max by (node) (gpu_orchestrator_node_gpus{{{J}}}))"
    alloc = f"sum(max by (node) (gpu_orchestrator_node_gpus_allocated{{{J}}}))"
    panels += [
        stat("GPUs", "GPUs the nodes offer (healthy GPUNode devices, else nvidia.com/gpu "
             "allocatable).", total, 0, y),
        stat("Allocated", "GPUs held by GPUWorkloads or by other pods' nvidia.com/gpu "
             "requests.", alloc, 4, y),
        stat("Free", "GPUs no one holds.", f"{total} - {alloc}", 8, y,
             thresholds=[{"color": "red", "value": None}, {"color": "orange", "value": 1},
                         {"color": "green", "value": 4}]),
        stat("Allocated %", "Share of the cluster's GPUs in use.", f"{alloc} / {total}",
             12, y, unit="percentunit",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 0.8},
                         {"color": "red", "value": 0.95}]),
        stat("Pending workloads", "GPUWorkloads waiting for GPUs (kubectl gpu status).",
             f'max(gpu_orchestrator_workloads{{{J},phase="Pending"}})', 16, y,
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        stat("Leader", "1 when one manager replica holds the leader lease.",
             f"max(leader_election_master_status{{{J}}})", 20, y,
             thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}]),
    ]
    y += 4
    per_node = panel(
        "bargauge", "GPU allocation per node", "Allocated / total GPUs of each node.",
        [target(f"max by (node) (gpu_orchestrator_node_gpus_allocated{{{J}}})"
                f" / max by (node) (gpu_orchestrator_node_gpus{{{J}}})", "{{node}}",
                instant=True)],
        0, y, 12, 8, "percentunit")
    per_node["options"] = {"orientation": "horizontal", "displayMode": "gradient",
                           "reduceOptions": {"calcs": ["lastNotNull"]}}
    per_node["fieldConfig"]["defaults"].update({"min": 0, "max": 1})
    panels += [
        per_node,
        panel("timeseries", "Allocated GPUs per node", "GPUs held per node over time.",
              [target(f"max by (node) (gpu_orchestrator_node_gpus_allocated{{{J}}})",
                      "{{node}} allocated"),
               target(f"max by (node) (gpu_orchestrator_node_gpus{{{J}}})", "{{node}} total")],
              12, y, 12, 8),
    ]
    y += 8
    panels.append(row("Workloads and placement", y))
    y += 1
    panels += [
        panel("timeseries", "Workloads by phase", "GPUWorkloads per status.phase.",
              [target(f"max by (phase) (gpu_orchestrator_workloads{{{J}}})", "{{phase}}")],
              0, y, 8, 8),
        panel("timeseries", "Placement latency (create to bound)",
              "From a GPUWorkload's creation to its last child created bound to its node.",
              quantiles("gpu_orchestrator_create_to_bound_seconds", "", ""), 8, y, 8, 8, "s"),
        panel("timeseries", "Decision latency by strategy",
              "Time to compute one placement (filter, score, pick devices), no API calls.",
              quantiles("gpu_orchestrator_scheduling_decision_seconds", "strategy",
                        "{{strategy}} "), 16, y, 8, 8, "s"),
    ]
    y += 8
    panels += [
        panel("timeseries", "Placement attempts by result",
              "Decisions per second: scheduled, unschedulable, invalid, preempting.",
              [target(f"sum by (result) (rate(gpu_orchestrator_scheduling_attempts_total"
                      f"{{{J}}}[{RI}]))", "{{result}}")], 0, y, 8, 8, "ops"),
        panel("timeseries", "Retries, failures, preemptions",
              "Per second: retries scheduled by retryPolicy, workloads ended Failed (by "
              "reason), workloads preempted.",
              [target(f"sum(rate(gpu_orchestrator_retries_total{{{J}}}[{RI}]))", "retries"),
               target(f"sum by (reason) (rate(gpu_orchestrator_failures_total{{{J}}}[{RI}]))",
                      "failed: {{reason}}"),
               target(f"sum(rate(gpu_orchestrator_preemptions_total{{{J}}}[{RI}]))",
                      "preemptions")], 8, y, 8, 8, "ops"),
        panel("timeseries", "GPUNode heartbeat age",
              "Seconds since each GPUNode's agent last reported (alert at 5 min).",
              [target(f"max by (node) (gpu_orchestrator_gpunode_heartbeat_age_seconds{{{J}}})",
                      "{{node}}")], 16, y, 8, 8, "s"),
    ]
    y += 8
    panels.append(row("Reconcile health", y))
    y += 1
    panels += [
        panel("timeseries", "Reconciles by result",
              "Reconciles per second per controller and result.",
              [target(f"sum by (controller, result) (rate(controller_runtime_reconcile_total"
                      f"{{{J}}}[{RI}]))", "{{controller}} {{result}}")], 0, y, 8, 8, "ops"),
        panel("timeseries", "Reconcile errors",
              "Errors per second per controller (terminal: not retried).",
              [target(f"sum by (controller) (rate(controller_runtime_reconcile_errors_total"
                      f"{{{J}}}[{RI}]))", "{{controller}}"),
               target(f"sum by (controller) (rate("
                      f"controller_runtime_terminal_reconcile_errors_total{{{J}}}[{RI}]))",
                      "{{controller}} terminal")], 8, y, 8, 8, "ops"),
        panel("timeseries", "Reconcile duration",
              "Time per reconcile, per controller.",
              quantiles("controller_runtime_reconcile_time_seconds", "controller",
                        "{{controller}} "), 16, y, 8, 8, "s"),
    ]
    y += 8
    panels += [
        panel("timeseries", "Work queue depth", "Items waiting per queue.",
              [target(f"max by (name) (workqueue_depth{{{J}}})", "{{name}}")], 0, y, 8, 8),
        panel("timeseries", "Work queue wait", "Time items wait in the queue before a worker "
              "takes them.",
              quantiles("workqueue_queue_duration_seconds", "name", "{{name}} "),
              8, y, 8, 8, "s"),
        panel("timeseries", "Workers and scrape targets",
              "Busy workers per controller, and manager replicas up.",
              [target(f"sum by (controller) (controller_runtime_active_workers{{{J}}})",
                      "{{controller}} active workers"),
               target(f"sum by (controller) (controller_runtime_max_concurrent_reconciles"
                      f"{{{J}}})", "{{controller}} max workers"),
               target(f"sum(up{{{J}}})", "replicas up")], 16, y, 8, 8),
    ]
    y += 8
    y = shared_devices(panels, y)
    panels.append(row("Devices (NVML agent)", y))
    y += 1
    panels += [
        panel("timeseries", "GPU utilization", "Per device, from the NVML agent.",
              [target('max by (node, gpu) (gpu_orchestrator_agent_device_utilization_ratio'
                      '{node=~"$node"})', "{{node}}:{{gpu}}")], 0, y, 8, 8, "percentunit"),
        panel("timeseries", "GPU memory used", "Per device, share of its memory.",
              [target('max by (node, gpu) (gpu_orchestrator_agent_device_memory_used_bytes'
                      '{node=~"$node"}) / max by (node, gpu) ('
                      'gpu_orchestrator_agent_device_memory_total_bytes{node=~"$node"})',
                      "{{node}}:{{gpu}}")], 8, y, 8, 8, "percentunit"),
        panel("timeseries", "Unhealthy devices and ECC errors",
              "Devices the agent marks unhealthy, and uncorrected ECC errors per second.",
              [target('count by (node) (gpu_orchestrator_agent_device_healthy'
                      '{node=~"$node"} == 0)', "{{node}} unhealthy"),
               target('sum by (node) (rate(gpu_orchestrator_agent_device_ecc_errors_total'
                      f'{{node=~"$node"}}[{RI}]))', "{{node}} ECC/s")], 16, y, 8, 8),
    ]
    return {
        "title": "gpu-orchestrator",
        "uid": "gpu-orchestrator",
        "description": "GPU allocation per node, pending workloads, placement latency and "
                       "reconcile health of gpu-orchestrator. Alerts: docs/alerts.md.",
        "tags": ["gpu", "kubernetes", "gpu-orchestrator"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "graphTooltip": 1,
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Data source", "current": {}, "hide": 0},
            {"name": "job", "type": "custom", "label": "Manager job",
             "query": "gpu-orchestrator-metrics",
             "current": {"text": "gpu-orchestrator-metrics",
                         "value": "gpu-orchestrator-metrics"},
             "description": "The job of the manager's metrics Service "
                            "(config/prometheus/service.yaml)."},
            {"name": "node", "type": "query", "label": "Node", "datasource": DS,
             "definition": "label_values(gpu_orchestrator_node_gpus, node)",
             "query": {"query": "label_values(gpu_orchestrator_node_gpus, node)",
                       "refId": "node"},
             "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
             "current": {"text": "All", "value": "$__all"}},
        ]},
        "panels": panels,
    }


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(build(), indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
