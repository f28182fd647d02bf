"""A pod group is preempted whole or not at all (docs/podgroups.md): before any
member is asked to go, the PodDisruptionBudgets over its members must allow every
one of those evictions together. The Eviction API checks a budget one pod at a
time, so asking each member in turn would take the first ones a budget allows and
leave the group partly gone, the others refused (a training job that has lost some
of its pods is of no use, and the ones left still hold their GPUs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from controllers.podbinding.seedentry import is_group_key
from internal.objects import JSON
from runtime.errors import ApiError

log = structlog.get_logger("podbinding")


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (an empty one matches every pod, as a budget's does)."""
    selector = selector or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or ():
        value = labels.get(str(e.get("key")))
        values = [str(v) for v in e.get("values") or ()]
        op = e.get("operator")
        ok = ((op == "In" and value in values) or (op == "NotIn" and value not in values)
              or (op == "Exists" and value is not None)
              or (op == "DoesNotExist" and value is None))
        if not ok:
            return False
    return True


def budget_refusal(client: Any, namespace: str, members: list[JSON],
                   what: str = "member(s) of the group") -> str | None:
    """Why the budgets of ``namespace`` refuse evicting all of ``members`` at once
    (None: they allow it); ``what`` the members are, in the message. A budget that
    cannot be read refuses (its status is the disruption controller's to write:
    until it is there, nothing is evicted)."""
    try:
        budgets = client.list("policy/v1", "PodDisruptionBudget", namespace=namespace)["items"]
    except ApiError as exc:
        log.warning("group.evict.budgets_unreadable", namespace=namespace, error=str(exc))
        return f"the PodDisruptionBudgets of {namespace} cannot be read: {exc}"
    for pdb in budgets:
        meta = pdb.get("metadata") or {}
        covered = [m for m in members if _matches((pdb.get("spec") or {}).get("selector"),
                                                  (m.get("metadata") or {}).get("labels") or {})]
        if not covered:
            continue
        allowed = int((pdb.get("status") or {}).get("disruptionsAllowed") or 0)
        if allowed < len(covered):
            return (f"PodDisruptionBudget {namespace}/{meta.get('name')} allows {allowed} "
                    f"disruption(s) and covers {len(covered)} {what}")
    return None


def group_refusal(client: Any, ledger_key: str, members: list[JSON]) -> str | None:
    """Why the budgets refuse evicting every member of the pod group booked as
    ``ledger_key`` at once (it goes whole or not at all); None for them, or for
    another holder (``is_group_key``)."""
    if not is_group_key(ledger_key) or not members:
        return None
    ns = (members[0].get("metadata") or {}).get("namespace") or "default"
    return budget_refusal(client, ns, members)


def refused_text(ledger_key: str, refusal: str) -> str:
    """A preemptor's reason when the budgets of the pod group ``ledger_key`` refuse."""
    group = ledger_key.split(":", 1)[1]
    return (f"preemption of pod group {group} refused: {refusal}; none of it is evicted "
            "(a pod group is preempted whole or not at all)")


def namespaces_refusal(client: Any, by_ns: Mapping[str, list[JSON]]) -> str | None:
    """Why the budgets refuse evicting every one of ``by_ns``'s pods (by namespace)
    at once, or None."""
    for ns, pods in sorted(by_ns.items()):
        refusal = budget_refusal(client, ns, pods, "of the pods it would evict")
        if refusal is not None:
            return refusal
    return None
