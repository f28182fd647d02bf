"""``kubectl gpu nodes``: every GPU of every node, free or with the workload (and
replica) holding it (a shared device: its shares, ``3 shares, 60Gi of 80Gi``; a
MIG-enabled one: its instances held), plus its health, model and memory when a GPUNode reports them.
Free, unhealthy and stale are the controller's own judgement (internal/cli/inventory).
A caller who may read one namespace's holders only (a tenant) sees a device none of
them holds as ``unknown``, never ``free``: another namespace may hold it."""

from __future__ import annotations

import argparse

from internal.cli import validate
from internal.cli.common import add_view_flags, gpu_view, holders_note
from internal.cli.inventory import Device, NodeGPUs
from internal.cli.kube import Kube
from internal.cli.output import Printer, age

HELP = "each node's GPU devices: free or held by which workload, and health"
#: what a tenant's view says of a device none of its namespace's holders holds
UNKNOWN_HOLDER = "unknown (another namespace may hold it)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("node", nargs="*", help="only these nodes",
                   type=validate.dns_subdomain("node"))
    add_view_flags(p)


def _mem(used: int | None, total: int | None) -> str:
    if total is None:
        return "-"
    return f"{used or 0}/{total} MiB"


def run(args: argparse.Namespace, kube: Kube, out: Printer) -> int:
    pic, _ = gpu_view(kube, args.gpunode_stale_after, args.dra_driver)
    view = pic.nodes
    if args.node:
        missing = sorted(set(args.node) - {n.name for n in view})
        if missing:
            from internal.cli.kube import EXIT_NOT_FOUND, CliError

            raise CliError(f"no GPU node named {', '.join(missing)}", EXIT_NOT_FOUND)
        view = [n for n in view if n.name in args.node]
    if out.structured:
        data = {"nodes": [n.to_dict() for n in view], "problems": pic.problems}
        if pic.holders_from is not None:
            data["holdersFrom"] = pic.holders_from
        out.data(data)
        return 0
    if not view:
        out.line("No nodes with GPUs (no nvidia.com/gpu allocatable and no GPUNode).")
        return 0
    rows, styles = [], []
    for n in view:
        for d in n.devices:
            rows.append([n.name, d.index, _holder_text(d), d.health, d.model,
                         _mem(d.memory_used_mib, d.memory_total_mib),
                         "-" if d.utilization is None else f"{d.utilization}%"])
            styles.append("red" if d.health in ("Unhealthy", "Stale") else
                          ("green" if d.free else "yellow" if d.unknown else None))
        for holder, count in sorted(n.counted.items()):
            rows.append([n.name, "?", f"{holder} ({count} GPU, no device index)",
                         "-", "", "-", "-"])
            styles.append("yellow")
    out.table(["node", "gpu", "workload", "health", "model", "memory", "util"], rows,
              styles=styles)
    out.line()
    out.table(["node", "state", "source", "authority", "gpus", "allocated", "free",
               "unhealthy", "stale", "heartbeat"],
              [[n.name, n.state, n.source, n.authority, n.total, allocated_text(n),
                free_text(n),
                n.unhealthy, n.stale,
                f"{age(n.heartbeat)} ago" if n.heartbeat else "-"] for n in view])
    out.line("free: devices the controller would offer now (healthy, agent reporting, "
             "not held); '?': GPUs held without a device index, taken from FREE, so no "
             "unnamed device of that node shows free")
    note = holders_note(pic)
    if note:
        out.line(note)
    over = [n for n in view if n.overcommitted]
    if over:
        out.line()
        out.heading("Over-committed (more GPUs held than the node has: two holders share "
                    "a GPU; the later pod gets a DeviceConflict Event):")
        for n in over:
            out.line(f"  {n.name}: ALLOCATED {n.allocated_text}")
    if pic.problems:
        out.line()
        out.heading("Problems the controller reports (what it cannot book or read):")
        for p in pic.problems:
            out.line(f"  {p}")
    return 0


def free_text(n: NodeGPUs) -> str:
    """``2``, or ``<=2`` where other namespaces' holders were not read."""
    return f"<={n.free}" if n.partial else str(n.free)


def allocated_text(n: NodeGPUs) -> str:
    """``2`` (``6 of 4`` over-committed), or ``>=2`` where other namespaces'
    holders were not read."""
    return f">={n.allocated_text}" if n.partial else n.allocated_text


def _holder_text(d: Device) -> str:
    """Who holds ``d``; ``free`` only when the controller would offer it, ``-`` for
    an unheld device it would not (unhealthy, stale, absent), ``unknown`` for one no
    holder read holds where another namespace's may."""
    if d.unknown:
        return UNKNOWN_HOLDER
    if d.sharing is not None:
        return f"{d.sharing}: {d.holder}" if d.holder is not None else d.sharing
    if d.holder is not None:
        return d.holder
    if d.counted_for_sure:
        return "counted (?)"
    if d.maybe_counted and d.offered:
        return "free or counted (?)"
    return "free" if d.offered else "-"
