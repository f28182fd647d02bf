"""The GPUWorkload status a reconcile wants, built in one place and written once.

``StatusBuilder`` starts from the object's current status; each step of a reconcile
says what it observed or decided (phase, message, placements, a condition, the
retry bookkeeping), and the reconciler writes the result once at the end, only when
it differs from what the API already has (conditions compared without their
timestamps).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from api.v1alpha1.types import Phase, pod_selector
from controllers.status.conditions import set_condition
from internal.objects import JSON


def fmt_time(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(s: str | None) -> datetime | None:
    if not s:
        return None
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


class StatusBuilder:
    def __init__(self, raw: JSON, now: datetime) -> None:
        old = raw.get("status") or {}
        self.old = old
        self.now = fmt_time(now)
        self.generation = (raw.get("metadata") or {}).get("generation")
        self.name = (raw.get("metadata") or {}).get("name") or ""
        self.spec = raw.get("spec") or {}
        self.status: dict[str, Any] = {
            "phase": old.get("phase") or Phase.PENDING.value,
            "message": old.get("message") or "",
            "conditions": [dict(c) for c in old.get("conditions") or ()],
            "observedGeneration": self.generation,
            "retries": old.get("retries", 0),
            "placements": old.get("placements") or None,
            "nextRetryTime": old.get("nextRetryTime"),
            "nominatedOver": old.get("nominatedOver") or None,
            "strategy": old.get("strategy") or None,
            "rejections": old.get("rejections") or None,
        }

    def phase(self, phase: Phase, message: str) -> StatusBuilder:
        self.status["phase"] = phase.value
        self.status["message"] = message
        return self

    def condition(self, type_: str, status: bool, reason: str, message: str) -> StatusBuilder:
        self.status["conditions"] = set_condition(self.status["conditions"], type_, status,
                                                  reason, message, self.now, self.generation)
        return self

    def placements(self, placements: list[dict[str, Any]] | None) -> StatusBuilder:
        """The attempt's placements; None (not placed) also ends any nomination."""
        self.status["placements"] = placements or None
        if not placements:
            self.status["nominatedOver"] = None
        return self

    def nominated(self, owners: list[str] | None) -> StatusBuilder:
        """The owners a preemptor's placement is nominated over while it waits for
        them (``status.nominatedOver``); None once its children are made."""
        self.status["nominatedOver"] = sorted(owners) if owners else None
        return self

    def strategy(self, name: str) -> StatusBuilder:
        """The strategy the controller places it with (the spec's, else the default).
        A placed workload keeps the one that placed it: a manager restarted with
        another ``--default-strategy`` changes only what it places from then on."""
        if not (self.old.get("placements") and self.old.get("strategy")):
            self.status["strategy"] = name
        return self

    def rejected(self, node: str, reason: str, message: str,
                 keep: Callable[[JSON], bool]) -> StatusBuilder:
        """A node's kubelet rejected a pod (``status.rejections``, one entry a node,
        the latest); the entries ``keep`` no longer wants (expired) go."""
        kept = [r for r in self.status["rejections"] or () if r.get("node") != node and keep(r)]
        kept.append({"node": node, "reason": reason, "message": message[:1024],
                     "time": self.now})
        self.status["rejections"] = sorted(kept, key=lambda r: r["node"])
        return self

    def retry(self, retries: int | None = None, next_retry: str | None = None) -> StatusBuilder:
        if retries is not None:
            self.status["retries"] = retries
        self.status["nextRetryTime"] = next_retry
        return self

    def build(self) -> dict[str, Any]:
        out = dict(self.status)
        pls = out.get("placements") or ()
        out["gpus"] = gpus_held(pls, self.spec)  # 0 while not placed
        out["gpuSummary"] = gpu_summary(self.spec, out["gpus"]) if pls else "0"
        out["nodes"] = ",".join(sorted({p["node"] for p in pls})) or None
        # the scale subresource's view: replicas holding a placement (never more
        # than the spec asks for) and the selector of their pods
        out["replicas"] = min(len(pls), int(self.spec.get("replicas") or 1))
        out["selector"] = pod_selector(self.name)
        return out


def add_finalizer_patch(meta: JSON, finalizer: str) -> dict[str, Any]:
    """The merge patch that adds ``finalizer`` to an object whose metadata is
    ``meta``, only if it is unchanged since (its resourceVersion), else Conflict."""
    return {"metadata": {"finalizers": [*(meta.get("finalizers") or ()), finalizer],
                         "resourceVersion": meta["resourceVersion"]}}


def gpus_held(placements: Any, spec: JSON) -> int:
    """Distinct devices named (a map may share one between replicas), plus the
    counted GPUs of device-plugin replicas."""
    per_replica = spec.get("gpusPerReplica") or spec.get("gpuCount") or 1
    named = {(p["node"], d) for p in placements for d in p.get("devices") or ()}
    counted = sum(per_replica for p in placements if not p.get("devices"))
    return len(named) + counted


def gpu_summary(spec: JSON, gpus: int | None) -> str | None:
    """``kubectl get gw``'s GPUS: each replica's share (``20Gi``, ``0.25``) or MIG
    profile (``1g.10gb``), else the GPUs held."""
    share = spec.get("gpuShare") or {}
    part = spec.get("migProfile") or share.get("memory") or share.get("fraction")
    return str(part) if part else (str(gpus) if gpus else None)


def _strip(conds: Any) -> list[tuple[Any, ...]]:
    return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in conds or ()]


def same_status(old: JSON, new: JSON) -> bool:
    """Would writing ``new`` change what a user sees? (Timestamps aside.)"""
    for k, v in new.items():
        if k == "conditions":
            if _strip(old.get(k)) != _strip(v):
                return False
        elif (old.get(k) if old.get(k) not in ([], "", None) else None) != \
                (v if v not in ([], "", None) else None):
            return False
    return True
