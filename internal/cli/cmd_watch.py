"""``kubectl gpu watch``: one line per change of a GPUWorkload (phase, placements,
why pending), until Ctrl-C or ``--timeout``. With ``-o json|yaml`` each change is
printed as the watch event (JSON: one object per line)."""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime

from internal.cli import inventory, validate
from internal.cli.kube import Kube
from internal.cli.output import Printer
from internal.objects import object_key

HELP = "stream GPUWorkload changes: phase, placements, why pending"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=validate.duration, default=0, metavar="DURATION",
                   help="stop after this long: seconds, or 30s, 5m; 0 runs until Ctrl-C "
                        "(default 0)")
    p.add_argument("--no-initial", action="store_true",
                   help="skip the current state; print changes only")


def describe_line(kind: str, w: dict, all_ns: bool) -> str:
    md = w.get("metadata") or {}
    name = f"{md.get('namespace')}/{md.get('name')}" if all_ns else md.get("name")
    phase = inventory.workload_phase(w)
    text = f"{datetime.now(UTC).strftime('%H:%M:%S')}  {kind:<8} {name}  {phase}"
    placements = inventory.placements_text(w)
    if placements != "-":
        text += f"  {placements}"
    if phase == "Pending" and kind != "DELETED":
        why = (inventory.pending_reason(w).splitlines() or [""])[0]
        if why:
            text += f"  ({why})"
    return text


def run(args: argparse.Namespace, kube: Kube, out: Printer) -> int:
    deadline = time.monotonic() + args.timeout if args.timeout > 0 else None
    items, rv = kube.workloads_and_version()
    seen: dict[str, str] = {}

    def emit(kind: str, w: dict) -> None:
        key = object_key(w)
        sig = json.dumps([kind == "DELETED", w.get("status")], sort_keys=True, default=str)
        if seen.get(key) == sig:
            return  # a spec/metadata-only change: nothing the user watches moved
        seen[key] = sig
        if out.fmt == "json":
            out.stream.write(json.dumps({"type": kind, "object": w}, default=str) + "\n")
            out.stream.flush()
        elif out.fmt == "yaml":
            out.stream.write("---\n")
            out.data({"type": kind, "object": w})
        else:
            style = {"Pending": "yellow", "Failed": "red", "Running": "green"}.get(
                inventory.workload_phase(w))
            out.line(describe_line(kind, w, kube.all_namespaces),
                     style="dim" if kind == "DELETED" else style)

    if not args.no_initial:
        for w in items:
            emit("EXISTING", w)
    while deadline is None or time.monotonic() < deadline:
        remaining = None if deadline is None else max(1, int(deadline - time.monotonic()))
        for ev in kube.watch_workloads(rv, min(remaining or 300, 300)):
            obj = ev.get("object") or {}
            if ev.get("type") == "ERROR":  # 410 Gone: start again from now
                rv = None
                break
            rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
            if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                emit(ev["type"], obj)
            if deadline is not None and time.monotonic() >= deadline:
                break
    return 0
