"""Kubernetes-convention conditions on raw status dicts, and a workload's phase
aggregated from its children."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from api.v1alpha1.types import Phase

# condition types
SCHEDULED = "Scheduled"
READY = "Ready"
FAILED = "Failed"
PREEMPTED = "Preempted"
#: False while this controller's configuration cannot manage a workload that already
#: runs (``deviceExposure: dra`` without ``--enable-dra``): its children are left alone
MANAGED = "Managed"


def set_condition(conditions: list[dict[str, Any]], type_: str, status: bool, reason: str,
                  message: str, now: str, generation: int | None) -> list[dict[str, Any]]:
    """Returns ``conditions`` with ``type_`` set; lastTransitionTime only moves when
    the status flips."""
    want = "True" if status else "False"
    out: list[dict[str, Any]] = []
    found = False
    for c in conditions:
        if c.get("type") != type_:
            out.append(dict(c))
            continue
        found = True
        changed = c.get("status") != want
        out.append({
            "type": type_, "status": want, "reason": reason, "message": message,
            "lastTransitionTime": now if changed else c.get("lastTransitionTime", now),
            "observedGeneration": generation,
        })
    if not found:
        out.append({"type": type_, "status": want, "reason": reason, "message": message,
                    "lastTransitionTime": now, "observedGeneration": generation})
    return out


def get_condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in status.get("conditions") or ():
        if c.get("type") == type_:
            return c
    return None


def child_phase(child: Mapping[str, Any], pods: Iterable[Mapping[str, Any]] = ()) -> str:
    """Pending, Running, Succeeded, Failed, or Lost (being deleted) for a Pod or Job.

    A Job (``pods``: the pods it controls, as this controller's cache shows them)
    has ended when the Job controller says so (its ``Complete`` or ``Failed``
    condition: completions, ``backoffLimit``); until then it is Running while one
    of its pods is Running, by the same rule as a Pod child, and never from the
    Job's ``status.ready`` or ``status.active``, which another controller writes
    and may leave stale. A Job's pod that ended (or is being deleted) runs no more:
    the Job is Pending until the Job controller concludes it."""
    if (child.get("metadata") or {}).get("deletionTimestamp"):
        return "Lost"
    status = child.get("status") or {}
    if child.get("kind") == "Job":
        for c in status.get("conditions") or ():
            if c.get("status") == "True" and c.get("type") in ("Complete", "SuccessCriteriaMet"):
                return "Succeeded"
            if c.get("status") == "True" and c.get("type") in ("Failed", "FailureTarget"):
                return "Failed"
        running = any(child_phase(p) == "Running" for p in pods)
        return "Running" if running else "Pending"
    phase = status.get("phase") or "Pending"
    return phase if phase in ("Running", "Succeeded", "Failed") else "Pending"


def aggregate(phases: Mapping[int, str], replicas: int) -> tuple[Phase, str]:
    """The workload's phase from its replicas' child phases (index -> phase)."""
    failed = sorted(i for i, p in phases.items() if p in ("Failed", "Lost"))
    if failed:
        return Phase.FAILED, f"replica(s) {', '.join(map(str, failed))} failed"
    done = [i for i, p in phases.items() if p == "Succeeded"]
    if len(done) == replicas:
        return Phase.SUCCEEDED, f"all {replicas} replica(s) succeeded"
    running = [i for i, p in phases.items() if p == "Running"]
    if len(phases) == replicas and len(running) + len(done) == replicas:
        return Phase.RUNNING, f"{len(running)} of {replicas} replica(s) running"
    return Phase.SCHEDULED, f"{len(running)} of {replicas} replica(s) running"
