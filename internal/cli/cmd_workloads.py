"""``kubectl gpu workloads``: GPUWorkloads like ``kubectl get``, with placements
(``index=node:devices``) and the reason a pending one waits."""

from __future__ import annotations

import argparse

from internal.cli import inventory, validate
from internal.cli.kube import Kube
from internal.cli.output import Printer, age

HELP = "GPUWorkloads with phase, strategy, GPUs and placements"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="*", help="only these workloads",
                   type=validate.dns_subdomain("workload"))


def row(w: dict, all_ns: bool) -> list:
    spec = w.get("spec") or {}
    reps = int(spec.get("replicas") or 1)
    per = inventory.gpus_per_replica(w)
    r = [w["metadata"]["name"], inventory.workload_phase(w),
         spec.get("schedulingStrategy") or (w.get("status") or {}).get("strategy") or "-",
         reps, reps * per,
         inventory.placements_text(w), age(w["metadata"].get("creationTimestamp"))]
    return [w["metadata"].get("namespace"), *r] if all_ns else r


def run(args: argparse.Namespace, kube: Kube, out: Printer) -> int:
    items = kube.workloads()
    if args.name:
        missing = sorted(set(args.name) - {w["metadata"]["name"] for w in items})
        if missing:
            from internal.cli.kube import EXIT_NOT_FOUND, CliError

            raise CliError(f"GPUWorkload {', '.join(missing)} not found in namespace "
                           f"{kube.namespace}", EXIT_NOT_FOUND)
        items = [w for w in items if w["metadata"]["name"] in args.name]
    if out.structured:
        out.data({"apiVersion": "v1", "kind": "List", "items": items})
        return 0
    if not items:
        where = "any namespace" if kube.all_namespaces else f"namespace {kube.namespace}"
        out.line(f"No GPUWorkloads in {where}.")
        return 0
    cols = ["name", "phase", "strategy", "replicas", "gpus", "placements", "age"]
    if kube.all_namespaces:
        cols = ["namespace", *cols]
    styles = [{"Pending": "yellow", "Failed": "red", "Running": "green"}.get(
        inventory.workload_phase(w)) for w in items]
    out.table(cols, [row(w, kube.all_namespaces) for w in items], styles=styles)
    return 0
