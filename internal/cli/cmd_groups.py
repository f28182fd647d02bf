"""``kubectl gpu groups``: the pod groups of other controllers (a JobSet's, a
LeaderWorkerSet group's, an Indexed Job's, labelled pods) that ``gpu-scheduler``
places all or nothing (docs/podgroups.md): members present of those needed, bound,
running, and, for a group not placed, why, from its members' latest Event."""

from __future__ import annotations

import argparse
from typing import Any

from internal.cli import validate
from internal.cli.kube import Kube
from internal.cli.output import Printer
from internal.objects import JSON
from internal.scheduling.podgroups import GroupRefusal, PodGroup, pod_group

HELP = "pod groups of other controllers' pods: members present, bound, running, why not"
#: the Events that say why a group waits or was not placed, most telling first
REASONS = ("FailedScheduling", "PodGroupIncomplete", "PodGroupSizesDisagree",
           "PodGroupSizeUnreadable", "WaitingForGroup")
SCHEDULER = "gpu-scheduler"


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


def groups(kube: Kube, scheduler: str) -> list[dict[str, Any]]:
    """Each group among the live pods of ``scheduler`` (its members, size, state)."""
    owners = _owners(kube)
    found: dict[str, dict[str, Any]] = {}
    for p in kube.pods(None if kube.all_namespaces else kube.namespace):
        if (p.get("spec") or {}).get("schedulerName") != scheduler or \
                (p.get("metadata") or {}).get("deletionTimestamp") or \
                (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        g = pod_group(p, owners)
        if g is None:
            continue
        key = g.key if isinstance(g, PodGroup) else (g.key or f"?{p['metadata']['name']}")
        row = found.setdefault(key, {"key": key, "members": [], "sizes": set(),
                                     "source": g.source, "refused": None})
        row["members"].append(p)
        if isinstance(g, GroupRefusal):
            row["refused"] = g.message
        else:
            row["sizes"].add(g.size)
    return sorted(found.values(), key=lambda r: r["key"])


def _state(row: dict[str, Any]) -> tuple[str, int, int]:
    members = row["members"]
    bound = sum(1 for p in members if (p.get("spec") or {}).get("nodeName"))
    running = sum(1 for p in members if (p.get("status") or {}).get("phase") == "Running")
    size = max(row["sizes"]) if row["sizes"] else 0
    if row["refused"] or len(row["sizes"]) > 1:
        state = "Refused"
    elif size and bound >= size:
        state = "Placed"
    elif len(members) < size:
        state = "WaitingForMembers"
    else:
        state = "Unschedulable" if not bound else "Partial"
    return state, bound, running


def run(args: argparse.Namespace, kube: Kube, out: Printer) -> int:
    rows = groups(kube, args.scheduler_name)
    if args.name:
        rows = [r for r in rows if r["key"].split("/", 1)[-1] in args.name
                or r["key"].rsplit(":", 1)[0].split(":", 1)[-1] in args.name]
    if out.structured:
        out.data({"apiVersion": "v1", "kind": "List", "items": [{
            "group": r["key"], "source": r["source"],
            "members": [p["metadata"]["name"] for p in r["members"]],
            "size": max(r["sizes"]) if r["sizes"] else None,
            "state": _state(r)[0], "why": _why(kube, r["members"])} for r in rows]})
        return 0
    if not rows:
        where = "any namespace" if kube.all_namespaces else f"namespace {kube.namespace}"
        out.line(f"No pod groups of {args.scheduler_name} pods in {where}.")
        return 0
    table, styles = [], []
    for r in rows:
        state, bound, running = _state(r)
        size = "/".join(str(s) for s in sorted(r["sizes"])) or "?"
        why = "" if state == "Placed" else _why(kube, r["members"]) or (r["refused"] or "")
        table.append([r["key"], r["source"], f"{len(r['members'])}/{size}", bound, running,
                      state, why[:160]])
        styles.append({"Placed": "green", "Refused": "red"}.get(state, "yellow"))
    out.table(["group", "source", "members", "bound", "running", "state", "why"], table,
              styles=styles)
    return 0
