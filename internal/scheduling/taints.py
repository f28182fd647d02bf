"""Kubernetes taints and tolerations, as kube-scheduler matches them: whether a
toleration matches a taint, and the first NoSchedule/NoExecute taint of a node its
template does not tolerate (the filters' reason)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from internal.scheduling.authority import is_our_taint

if TYPE_CHECKING:
    from internal.scheduling.snapshot import NodeInfo


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes toleration matching for one taint."""
    t_key = taint.get("key", "")
    t_val = taint.get("value", "") or ""
    t_eff = taint.get("effect", "")
    for tol in tolerations:
        eff = tol.get("effect") or ""
        if eff and eff != t_eff:
            continue
        op = tol.get("operator") or "Equal"
        key = tol.get("key") or ""
        if op == "Exists":
            if not key or key == t_key:
                return True
        elif key == t_key and (tol.get("value") or "") == t_val:
            return True
    return False


def untolerated_taint(
    node: NodeInfo, tolerations: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint of ``node`` not tolerated, else None.
    The device-authority taint of a named node (``authority.OUR_TAINT``) is ours:
    every placement of ours tolerates it (it keeps the other schedulers off)."""
    tols = list(tolerations)
    for taint in node.taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute") or is_our_taint(taint):
            continue
        if not tolerates(tols, taint):
            return taint
    return None
