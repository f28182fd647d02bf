"""How much one node may report: the bound that keeps every placement decision's
work per node small, whatever a node says (pure: no I/O).

A node's GPUs come from its ``nvidia.com/gpu`` allocatable, its GPUNode's device
list, or the DRA driver's ResourceSlices (a GPUNode-shaped view, see
``resourceslices.py``), whichever the snapshot uses (``snapshot.py``). Each is
written by someone other than us (a kubelet and its device plugin, the agent, a
driver, an admin) and can be wrong: one Node whose status said
``nvidia.com/gpu: 1M`` once made every share decision walk a million devices,
and no workload anywhere was placed meanwhile. So:

- a node reporting more than ``limit`` GPUs (``--max-gpus-per-node``, default
  ``MAX_GPUS_PER_NODE``), a device with more than ``MAX_MIG_INSTANCES`` MIG
  instances, or a device with more NVLink peers than ``limit`` is *refused*: it
  offers nothing (its placements stay in the ledger, as on a stale node), the
  placement state reports it once (a Warning Event ``TooManyGPUs`` on the Node),
  and why-pending says ``node9: reports 1000000 GPUs, more than 64; excluded``;
- the check reads counts (a quantity, a list's length), never one device at a
  time beyond ``limit`` of them, so judging a node is bounded too.

Why 64: the largest GPU nodes have 8 to 16 GPUs (an HGX B200 8, a GB200 NVL
tray 4, the largest PCIe chassis 16 or 20); a replica may ask for at most 64
(``gpusPerReplica``); MIG adds up to 7 instances per GPU (A100, H100, H200, B200:
``1g`` slices), counted on their device, not as GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: GPUs one node may report (``--max-gpus-per-node``); see the module's docstring
MAX_GPUS_PER_NODE = 64
#: MIG instances one device may report (NVIDIA's largest split: seven ``1g``)
MAX_MIG_INSTANCES = 7
#: the reason of the Event on a refused Node
REFUSED_REASON = "TooManyGPUs"


def count_refusal(count: int, limit: int) -> str | None:
    """Why a node reporting ``count`` GPUs is refused (None: it is not)."""
    if count > limit:
        return f"reports {count} GPUs, more than {limit}; excluded"
    return None


def devices_refusal(devices: Sequence[Mapping[str, Any]], limit: int) -> str | None:
    """Why a node whose GPUNode view lists ``devices`` is refused (None: it is not):
    too many devices, or a device with too many MIG instances or NVLink peers.
    Reads at most ``limit`` devices, and only the lengths of their lists."""
    why = count_refusal(len(devices), limit)
    if why is not None:
        return why
    for d in devices:
        index = d.get("index", "?")
        migs = len(d.get("migInstances") or ())
        if migs > MAX_MIG_INSTANCES:
            return (f"device {index} reports {migs} MIG instances, more than "
                    f"{MAX_MIG_INSTANCES}; excluded")
        peers = len(d.get("nvlinkPeers") or ())
        if peers > limit:
            return f"device {index} reports {peers} NVLink peers, more than {limit}; excluded"
    return None


def event_message(node: str, why: str, source: str, limit: int) -> str:
    """The Warning Event on a refused node, in the scheduler's voice."""
    return (f"{node} {why} ({source}): its GPUs are not offered until it reports at "
            f"most {limit} (--max-gpus-per-node) and {MAX_MIG_INSTANCES} MIG instances "
            "per GPU; what runs there keeps its GPUs")
