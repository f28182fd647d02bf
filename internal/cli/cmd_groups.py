"""``kubectl gpu groups``: the pod groups of other controllers (a JobSet's, a
LeaderWorkerSet group's, an Indexed Job's, labelled pods) that ``gpu-scheduler``
places all or nothing (docs/podgroups.md): members present of those needed, bound,
running, and, for a group not placed, why, from its members' latest Event."""

from __future__ import annotations

import argparse
from typing import Any

from controllers.podbinding.group_metrics import GAUGE, SeenGroup, live_groups
from internal.cli import validate
from internal.cli.kube import Kube
from internal.cli.output import Printer
from internal.objects import JSON
from internal.scheduling.podgroups import pod_group

HELP = "pod groups of other controllers' pods: members present, bound, running, why not"
#: the Events that say why a group waits or was not placed, most telling first
REASONS = ("FailedScheduling", "PodGroupIncomplete", "PodGroupSizesDisagree",
           "PodGroupSizeUnreadable", "WaitingForGroup")
SCHEDULER = "gpu-scheduler"
#: the states the gauge counts as placed (Placed, and Reserved: a leader holding
#: its workers' slots)
PLACED = frozenset(state for state, gauge in GAUGE.items() if gauge == "placed")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="*", help="only these groups (their name, as in the "
                   "GROUP column)", type=validate.nonempty("group"))
    p.add_argument("--scheduler-name", default=SCHEDULER, type=validate.nonempty(
        "--scheduler-name"), help=f"the pod binding's scheduler name (default {SCHEDULER})")


def _owners(kube: Kube) -> Any:
    """Owner lookups through the caller's own rights (an owner it may not read
    leaves the group's size unknown, as the controller would say)."""
    def lookup(api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        try:
            return dict(kube.client.get(api_version, kind, name, namespace))
        except Exception:
            return None
    return lookup


def _why(kube: Kube, members: list[JSON]) -> str:
    seen: list[tuple[str, str, str]] = []
    for p in members:
        for e in kube.events_for({**p, "kind": "Pod"}, limit=5):
            if e.get("reason") in REASONS:
                seen.append((str(e.get("lastTimestamp") or e.get("eventTime") or ""),
                             -REASONS.index(e["reason"]), str(e["reason"]),
                             str(e.get("message") or "")))
    if not seen:
        return ""
    *_, reason, message = max(seen)  # the latest; of one second, the most telling
    return f"{reason}: {message}"


def groups(kube: Kube, scheduler: str) -> list[SeenGroup]:
    """Each group among the live pods of ``scheduler`` (its members, size, state),
    as the controller's gauge counts them."""
    owners = _owners(kube)
    return live_groups(kube.pods(None if kube.all_namespaces else kube.namespace), scheduler,
                       lambda p: pod_group(p, owners))


def _note(g: SeenGroup, state: str) -> str:
    """What the row says besides its state: a Reserved group's held slots."""
    if state != "Reserved":
        return ""
    return (f"{g.bound} bound, {g.reserved} slot(s) reserved for the members its "
            f"controller makes later")


def run(args: argparse.Namespace, kube: Kube, out: Printer) -> int:
    rows = groups(kube, args.scheduler_name)
    if args.name:
        rows = [r for r in rows if r.key.split("/", 1)[-1] in args.name
                or r.key.rsplit(":", 1)[0].split(":", 1)[-1] in args.name]
    if out.structured:
        out.data({"apiVersion": "v1", "kind": "List", "items": [{
            "group": r.key, "source": r.source,
            "members": [p["metadata"]["name"] for p in r.pods],
            "size": r.size, "state": r.state, "bound": r.bound, "running": r.running,
            "reserved": r.reserved, "why": _why(kube, r.pods)} for r in rows]})
        return 0
    if not rows:
        where = "any namespace" if kube.all_namespaces else f"namespace {kube.namespace}"
        out.line(f"No pod groups of {args.scheduler_name} pods in {where}.")
        return 0
    table, styles = [], []
    for r in rows:
        state = r.state
        size = "/".join(str(s) for s in sorted(r.sizes)) or "?"
        why = _note(r, state) if state in PLACED else \
            _why(kube, r.pods) or (r.refused or "")
        table.append([r.key, r.source, f"{len(r.members)}/{size}", r.bound, r.running,
                      state, why[:160]])
        styles.append("green" if state in PLACED else
                      "red" if state == "Refused" else "yellow")
    out.table(["group", "source", "members", "bound", "running", "state", "why"], table,
              styles=styles)
    return 0
