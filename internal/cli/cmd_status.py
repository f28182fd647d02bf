"""``kubectl gpu status``: cluster GPU totals (free, allocated, unhealthy) and the
workloads waiting for GPUs, with the first line of why. Read by a tenant (one
namespace's holders), free is an upper bound and allocated a lower one."""

from __future__ import annotations

import argparse

from internal.cli import inventory
from internal.cli.cmd_nodes import allocated_text, free_text
from internal.cli.common import add_view_flags, gpu_view, holders_note, in_scope
from internal.cli.kube import Kube
from internal.cli.output import Printer, age

HELP = "cluster GPU totals (free, allocated) and pending workloads"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_view_flags(p)


def run(args: argparse.Namespace, kube: Kube, out: Printer) -> int:
    pic, workloads = gpu_view(kube, args.gpunode_stale_after, args.dra_driver)
    view = pic.nodes
    t = inventory.totals(view, workloads)
    scope = in_scope(args, kube, workloads)
    pending = [w for w in scope if inventory.workload_phase(w) == "Pending"]
    if out.structured:
        out.data({
            "gpus": {"nodes": t.nodes, "total": t.total, "allocated": t.allocated,
                     **({"free": None, "freeAtMost": t.free} if t.partial
                        else {"free": t.free}),
                     "unhealthy": t.unhealthy, "stale": t.stale},
            "workloads": t.workloads,
            "pending": [{"namespace": w["metadata"].get("namespace"),
                         "name": w["metadata"]["name"],
                         "gpus": inventory.gpus_per_replica(w)
                         * int((w.get("spec") or {}).get("replicas") or 1),
                         "reason": inventory.pending_reason(w)} for w in pending],
            "nodes": [{"name": n.name, "state": n.state, "total": n.total,
                       "allocated": n.allocated, **n.free_dict(), "unhealthy": n.unhealthy,
                       "stale": n.stale} for n in view],
            **({"holdersFrom": pic.holders_from} if pic.holders_from is not None else {}),
        })
        return 0
    phases = ", ".join(f"{k} {v}" for k, v in t.workloads.items()) or "none"
    out.fields([
        ("Nodes with GPUs", t.nodes),
        ("GPUs", t.total),
        ("Allocated", f"at least {t.allocated}" if t.partial else t.allocated),
        ("Free", f"at most {t.free}" if t.partial else t.free),
        ("Unhealthy", t.unhealthy),
        ("Stale", t.stale),
        ("Workloads", phases),
    ])
    out.line()
    out.table(["node", "state", "gpus", "allocated", "free", "unhealthy", "stale"],
              [[n.name, n.state, n.total, allocated_text(n), free_text(n), n.unhealthy,
                n.stale] for n in view],
              styles=["red" if n.free == 0 else None for n in view])
    note = holders_note(pic)
    if note:
        out.line(note)
    out.line()
    where = "all namespaces" if kube.all_namespaces else f"namespace {kube.namespace}"
    if not pending:
        out.line(f"No pending workloads in {where}.")
        return 0
    out.heading(f"Pending workloads ({where}):")
    out.table(
        ["namespace", "name", "gpus", "age", "why"],
        [[w["metadata"].get("namespace"), w["metadata"]["name"],
          inventory.gpus_per_replica(w) * int((w.get("spec") or {}).get("replicas") or 1),
          age(w["metadata"].get("creationTimestamp")),
          (inventory.pending_reason(w).splitlines() or ["-"])[0]] for w in pending])
    return 0
