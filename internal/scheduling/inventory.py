"""Scheduler-side GPU inventory helpers (pure: no I/O, no clock but the one passed).

They produce and read the GPUNode dict shape that
``internal.scheduling.snapshot.Snapshot.upsert_gpunode`` consumes
(``status.devices[].index/healthy/...``, ``status.topologyKnown``).

- :func:`is_stale`: the agent's heartbeat (``status.lastHeartbeatTime``) is older than
  the threshold, or missing.
- :func:`fallback_gpunode`: for a node with no agent, devices ``0..n-1`` from its
  ``nvidia.com/gpu`` allocatable (healthy, memory and topology unknown).
- :func:`scheduling_view`: the GPUNode the scheduler should use for a node: the
  agent's when fresh; when stale, the same devices all marked not healthy (nothing
  new is offered there; existing placements are the ledger's to keep); the fallback
  when there is no GPUNode.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from api.v1alpha1.keys import GPU_RESOURCE
from internal.scheduling.quantity import gpu_count

API_VERSION = "gpu.orchestrator.dev/v1alpha1"
#: Annotation set on the views built here, so that readers can tell them apart.
SOURCE_ANNOTATION = "gpu.orchestrator.dev/inventory-source"
#: On views built from ResourceSlices: the DRA driver that publishes the node's GPUs.
DRA_DRIVER_ANNOTATION = "gpu.orchestrator.dev/dra-driver"
DEFAULT_STALE_AFTER = timedelta(seconds=90)


def parse_time(value: Any) -> datetime | None:
    """RFC 3339 (``2025-01-01T00:00:00Z``, with or without fraction/offset) -> aware
    datetime; None when missing or unparseable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def heartbeat(gpunode: Mapping[str, Any]) -> datetime | None:
    return parse_time((gpunode.get("status") or {}).get("lastHeartbeatTime"))


def _seconds(threshold: timedelta | float) -> float:
    return threshold.total_seconds() if isinstance(threshold, timedelta) else float(threshold)


def is_stale(
    gpunode: Mapping[str, Any], now: datetime, threshold: timedelta | float = DEFAULT_STALE_AFTER
) -> bool:
    """True when the GPUNode's heartbeat is missing or older than ``threshold``
    (a timedelta or seconds) at ``now``. A heartbeat in the future is fresh."""
    hb = heartbeat(gpunode)
    if hb is None:
        return True
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return (now - hb).total_seconds() > _seconds(threshold)


def allocatable_gpus(node: Mapping[str, Any]) -> int:
    """``nvidia.com/gpu`` from allocatable, else capacity, else 0."""
    st = node.get("status") or {}
    alloc = st.get("allocatable") or {}
    if GPU_RESOURCE in alloc:
        return gpu_count(alloc[GPU_RESOURCE])
    return gpu_count((st.get("capacity") or {}).get(GPU_RESOURCE))


def fallback_devices(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Devices ``0..n-1`` for a node without an agent: healthy, nothing else known."""
    return [{"index": i, "healthy": True, "nvlinkPeers": []} for i in range(allocatable_gpus(node))]


def fallback_gpunode(node: Mapping[str, Any]) -> dict[str, Any]:
    """A GPUNode-shaped dict for a node with no agent (``topologyKnown: false``)."""
    name = str((node.get("metadata") or {}).get("name") or "")
    devices = fallback_devices(node)
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUNode",
        "metadata": {"name": name, "annotations": {SOURCE_ANNOTATION: "allocatable"}},
        "spec": {"nodeName": name},
        "status": {
            "devices": devices,
            "deviceCount": len(devices),
            "healthyCount": len(devices),
            "topologyKnown": False,
        },
    }


def stale_view(gpunode: Mapping[str, Any], node: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A copy of ``gpunode`` with every device not healthy (none is offered). When it
    reports no devices, the node's allocatable devices are listed, not healthy."""
    out = copy.deepcopy(dict(gpunode))
    status = out.setdefault("status", {})
    devices = status.get("devices") or (fallback_devices(node) if node is not None else [])
    status["devices"] = [{**d, "healthy": False} for d in devices]
    status["healthyCount"] = 0
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), SOURCE_ANNOTATION: "stale"}
    return out


def scheduling_view(
    node: Mapping[str, Any],
    gpunode: Mapping[str, Any] | None,
    now: datetime,
    threshold: timedelta | float = DEFAULT_STALE_AFTER,
) -> dict[str, Any]:
    """The GPUNode to feed the scheduler's snapshot for ``node``."""
    if gpunode is None:
        return fallback_gpunode(node)
    if is_stale(gpunode, now, threshold):
        return stale_view(gpunode, node)
    return dict(gpunode)
