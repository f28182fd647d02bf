"""Pods the kubelet rejected at admission, and the nodes a workload avoids for it.

The kubelet re-checks a bound pod when it admits it (the pod count, requests,
nodeSelector and node affinity, host ports, NoExecute taints); a pod it refuses ends
``Failed`` with the kubelet's reason and a message that starts ``Pod was rejected:``
(kubelet ``rejectPod``). Node fit in the filters (``nodefit.py``) makes that rare;
it still happens when the node changed after the placement (its allocatable shrank,
a label or a taint came) or when the kubelet counts what the informer did not show.

A workload whose pod was rejected records the node in ``status.rejections`` and
the next attempts avoid that node **for a while** (``AVOID_SECONDS``), not until the
node changes: the kubelet's reason may come from the node's pods (which change
without the Node changing) as much as from the Node, and a view of ours that
disagreed with the kubelet's once may disagree again; after the window the node
fit filter decides again, so a node is never shut out for good.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from internal.objects import JSON

#: the start of a rejected pod's status.message (kubelet ``rejectPod``)
REJECTED_PREFIX = "Pod was rejected: "
#: how long a workload avoids a node whose kubelet rejected one of its pods
AVOID_SECONDS = 300


def kubelet_rejection(pods: Iterable[JSON]) -> tuple[str, str] | None:
    """The first of ``pods`` the kubelet rejected: (its reason, its message without
    ``Pod was rejected:``); None when none was."""
    for pod in pods:
        status = pod.get("status") or {}
        message = str(status.get("message") or "")
        if status.get("phase") == "Failed" and message.startswith(REJECTED_PREFIX):
            return str(status.get("reason") or "Rejected"), message[len(REJECTED_PREFIX):]
    return None


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def live(entry: JSON, now: datetime) -> bool:
    """Is a ``status.rejections`` entry still avoided at ``now``?"""
    when = _when(entry.get("time"))
    return when is not None and (now - when).total_seconds() < AVOID_SECONDS


def avoid_reason(rejections: Sequence[Any], node: str, now: datetime | None = None
                 ) -> str | None:
    """Why this workload avoids ``node`` (a kubelet rejected one of its pods there
    less than ``AVOID_SECONDS`` ago), else None. ``rejections`` are the status's
    entries (models with ``node``, ``reason``, ``time``)."""
    for r in rejections:
        if r.node != node:
            continue
        when = _when(r.time)
        if when is None:
            return None
        age = ((now or datetime.now(UTC)) - when).total_seconds()
        if age >= AVOID_SECONDS:
            return None
        return (f"its kubelet rejected this workload's pod {max(0, int(age))}s ago "
                f"({r.reason}); avoided for {AVOID_SECONDS // 60}m")
    return None
