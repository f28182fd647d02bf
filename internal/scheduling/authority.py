"""One authority per node for the identity of its GPUs (docs/install.md, one authority
per node): who decides *which* device a holder gets.

- ``named``: the ledger names every device (our children, the seed path, pods bound
  by gpu-scheduler); no device-plugin allocation happens there, and the node carries
  the ``gpu.orchestrator.dev/device-authority=named:NoSchedule`` taint that keeps
  kube-scheduler's pods off (our placements tolerate it: ``OUR_TAINT``).
- ``counted``: the device plugin picks; the ledger only counts GPUs there
  (``deviceExposure: device-plugin``, pods that only request ``nvidia.com/gpu``).
- ``dra``: ResourceClaims hold every device (``deviceExposure: dra``).

A node says which by its ``gpu.orchestrator.dev/device-authority`` label. A node
without it is decided by what holds there: named devices make it named, counted
GPUs counted, so the ledger never mixes the two on one node (``refusal``). Where two
authorities still meet (a pod forced there by ``spec.nodeName``), the ledger reports
the over-commit (``DeviceLedger.set_pod``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL

if TYPE_CHECKING:
    from internal.scheduling.view import View

NAMED, COUNTED, DRA = "named", "counted", "dra"
AUTHORITIES = (NAMED, COUNTED, DRA)
#: the taint of a named node; every placement of ours tolerates it
OUR_TAINT = {"key": DEVICE_AUTHORITY_LABEL, "value": NAMED, "effect": "NoSchedule"}


def declared(labels: Mapping[str, str]) -> str:
    """The authority a node's label declares ("" when none, or not one of ours)."""
    value = labels.get(DEVICE_AUTHORITY_LABEL, "")
    return value if value in AUTHORITIES else ""


def is_our_taint(taint: Mapping[str, Any]) -> bool:
    return taint.get("key") == DEVICE_AUTHORITY_LABEL


def effective(labels: Mapping[str, str], has_named: bool, has_counted: bool) -> str:
    """The authority a node has now: its label's, else what holds there ("" when
    nothing does, or both do: a node mixed before it was declared)."""
    return declared(labels) or (NAMED if has_named and not has_counted else
                                COUNTED if has_counted and not has_named else "")


def refusal(node: str, labels: Mapping[str, str], view: View, *, counted: bool,
            dra: bool) -> str | None:
    """Why a placement that is ``counted`` (the device plugin picks) or named (``dra``:
    through a ResourceClaim) may not go on ``node``, or None."""
    want = DRA if dra else COUNTED if counted else NAMED
    have = declared(labels)
    if have:
        if have == want or (have == NAMED and want == DRA):
            return None
        return f"device authority {have} ({DEVICE_AUTHORITY_LABEL}), not {want}"
    ledger = view.ledger
    if want == COUNTED:
        other = ledger.named_holder(node, view.mine)
        return None if other is None else \
            f"devices held by name ({other}); a device-plugin placement would not know them"
    other = ledger.counted_holder(node, view.mine)
    return None if other is None else \
        f"GPUs held by the device plugin ({other}); named devices could be the same ones"
