"""``kubectl gpu queues``: each GPUQueue's quota and what it uses, as its status
(written by the controller from its ledger) says: nominal, used, borrowed and lent
GPUs, admitted and pending workloads, and a bar per queue (docs/queues.md)."""

from __future__ import annotations

import argparse
from typing import Any

from api.v1alpha1.types import API_VERSION, GROUP
from internal.cli import validate
from internal.cli.kube import EXIT_NOT_FOUND, CliError, Kube
from internal.cli.output import Printer

HELP = "GPUQueues: quota, GPUs used and borrowed, pending workloads"
#: the bar's width in characters
BAR = 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="*", help="only these queues",
                   type=validate.dns_subdomain("queue"))


def _num(v: Any) -> float:
    try:
        return float(v or 0)
    except (TypeError, ValueError):
        return 0.0


def _text(v: float) -> str:
    return str(int(v)) if v == int(v) else f"{v:.2f}".rstrip("0").rstrip(".")


def bar(nominal: float, used: float, width: int = BAR) -> str:
    """``#`` used within the nominal quota, ``+`` borrowed above it, ``.`` nominal
    left unused; scaled to the larger of nominal and used."""
    scale = max(nominal, used)
    if scale <= 0:
        return "[" + " " * width + "]"
    own = min(used, nominal)
    cells = [round(own / scale * width), round(max(0.0, used - nominal) / scale * width)]
    cells.append(max(0, width - cells[0] - cells[1]) if nominal > used else 0)
    text = "#" * cells[0] + "+" * cells[1] + "." * cells[2]
    return "[" + text.ljust(width)[:width] + "]"


def row(q: dict) -> list:
    spec, status = q.get("spec") or {}, q.get("status") or {}
    nominal, used = _num(spec.get("nominalGPUs")), _num(status.get("usedGPUs"))
    limit = spec.get("borrowingLimit")
    return [q["metadata"]["name"], spec.get("cohort") or "-", _text(nominal),
            "-" if limit is None else str(limit), _text(used),
            _text(_num(status.get("borrowedGPUs"))), _text(_num(status.get("lentGPUs"))),
            int(status.get("admittedWorkloads") or 0), int(status.get("pendingWorkloads") or 0),
            bar(nominal, used)]


def run(args: argparse.Namespace, kube: Kube, out: Printer) -> int:
    kube.require_kind(API_VERSION, "GPUQueue", f"gpuqueues.{GROUP}")
    items = sorted(kube.queues(), key=lambda q: q["metadata"]["name"])
    if args.name:
        missing = sorted(set(args.name) - {q["metadata"]["name"] for q in items})
        if missing:
            raise CliError(f"GPUQueue {', '.join(missing)} not found", EXIT_NOT_FOUND)
        items = [q for q in items if q["metadata"]["name"] in args.name]
    if out.structured:
        out.data({"apiVersion": "v1", "kind": "List", "items": items})
        return 0
    if not items:
        out.line("No GPUQueues: workloads are placed without quota.")
        return 0
    styles = ["yellow" if int((q.get("status") or {}).get("pendingWorkloads") or 0) else None
              for q in items]
    out.table(["queue", "cohort", "nominal", "borrow limit", "used", "borrowed", "lent",
               "admitted", "pending", "usage"], [row(q) for q in items], styles=styles)
    return 0
