"""What the agent writes, built from a :class:`NodeSample` (pure): the GPUNode status,
the node labels, and the fingerprint that decides whether a change is worth an
immediate write.

Status shape (``api.v1alpha1.GPUNodeStatus`` on the wire)::

    status:
      devices:
      - index: 0
        uuid: GPU-...
        model: NVIDIA H100 80GB HBM3
        memoryTotalMiB: 81559
        memoryUsedMiB: 531
        utilization: 0          # percent
        temperature: 31         # Celsius
        powerWatts: 69.876
        eccErrors: 0            # volatile uncorrected
        healthy: true
        migMode: false
        migInstances: []        # on a MIG-enabled device: uuid, profile,
                                # memoryTotalMiB, placement ("<start>:<size>")
        nvlinkPeers: [1, 2, 3, 4, 5, 6, 7]
      deviceCount: 8
      healthyCount: 8
      driverVersion: 550.54.15
      cudaVersion: "12.4"
      topologyKnown: true
      lastHeartbeatTime: "2025-01-01T00:00:00Z"
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable
from datetime import datetime
from typing import Any

from api.v1alpha1.sharing import MigInstance
from api.v1alpha1.types import API_VERSION, GPUDevice, GPUNodeStatus, format_time
from internal.agent.nvml.types import DeviceState, NodeSample

LABEL_PREFIX = "gpu.orchestrator.dev/"
LABEL_GPU_COUNT = LABEL_PREFIX + "gpu-count"
LABEL_GPU_MODEL = LABEL_PREFIX + "gpu-model"
LABEL_GPU_MEMORY = LABEL_PREFIX + "gpu-memory-mib"
LABEL_NVLINK = LABEL_PREFIX + "nvlink"
AGENT_LABELS = (LABEL_GPU_COUNT, LABEL_GPU_MODEL, LABEL_GPU_MEMORY, LABEL_NVLINK)

MIB = 1024 * 1024


def device_status(d: DeviceState) -> GPUDevice:
    return GPUDevice(
        index=d.index,
        uuid=d.uuid,
        model=d.model,
        memory_total_mib=d.memory_total_bytes // MIB,
        memory_used_mib=d.memory_used_bytes // MIB,
        utilization=d.utilization,
        temperature=d.temperature_c,
        power_watts=d.power_watts,
        ecc_errors=d.ecc_errors,
        healthy=d.healthy,
        mig_mode=d.mig_mode,
        mig_instances=[MigInstance(uuid=m.uuid, profile=m.profile,
                                   memory_total_mib=m.memory_total_bytes // MIB,
                                   placement=f"{m.start}:{m.size}")
                       for m in d.mig_devices] or None,
        nvlink_peers=list(d.nvlink_peers),
    )


def build_status(s: NodeSample, heartbeat: datetime) -> dict[str, Any]:
    """The GPUNode ``status`` (wire form) for sample ``s`` reported at ``heartbeat``."""
    st = GPUNodeStatus(
        devices=[device_status(d) for d in sorted(s.devices, key=lambda d: d.index)],
        device_count=len(s.devices),
        healthy_count=sum(1 for d in s.devices if d.healthy),
        driver_version=s.driver_version,
        cuda_version=s.cuda_version,
        topology_known=s.topology_known,
        last_heartbeat_time=heartbeat,
    )
    out = st.to_api()
    out["lastHeartbeatTime"] = format_time(heartbeat)
    return out


def new_gpunode(node_name: str, node_uid: str | None = None) -> dict[str, Any]:
    """A GPUNode with no status yet, owned by its Node when the Node's uid is known
    (so that deleting the Node garbage-collects it)."""
    meta: dict[str, Any] = {"name": node_name}
    if node_uid:
        meta["ownerReferences"] = [{
            "apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
        }]
    return {"apiVersion": API_VERSION, "kind": "GPUNode", "metadata": meta,
            "spec": {"nodeName": node_name}}


def fingerprint(s: NodeSample) -> Hashable:
    """What, when it changes, is written at once: the device set and identity, health,
    ECC errors, MIG mode, topology and driver. Utilization, memory used, temperature
    and power move all the time and are written on the interval."""
    return (
        s.driver_version,
        s.cuda_version,
        s.topology_known,
        tuple(
            (d.index, d.uuid, d.model, d.memory_total_bytes, d.healthy, d.ecc_errors,
             d.mig_mode, d.nvlink_peers, d.mig_devices)
            for d in sorted(s.devices, key=lambda d: d.index)
        ),
    )


_LABEL_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: str) -> str:
    """A valid label value: ``NVIDIA H100 80GB HBM3`` -> ``NVIDIA-H100-80GB-HBM3``."""
    v = _LABEL_BAD.sub("-", text.strip())[:63]
    return v.strip("-_.")


def node_labels(s: NodeSample) -> dict[str, str | None]:
    """The agent's node labels; ``None`` removes a label (merge-patch semantics)."""
    devs = s.devices
    labels: dict[str, str | None] = {LABEL_GPU_COUNT: str(len(devs))}
    if not devs:
        labels.update({LABEL_GPU_MODEL: None, LABEL_GPU_MEMORY: None, LABEL_NVLINK: None})
        return labels
    model = Counter(d.model for d in devs).most_common(1)[0][0]
    labels[LABEL_GPU_MODEL] = label_value(model) or None
    mem = min(d.memory_total_bytes for d in devs) // MIB
    labels[LABEL_GPU_MEMORY] = str(mem) if mem > 0 else None
    labels[LABEL_NVLINK] = "true" if any(d.nvlink_peers for d in devs) else "false"
    return labels


def gpunode_for(node_name: str, s: NodeSample, heartbeat: datetime,
                node_uid: str | None = None) -> dict[str, Any]:
    """A whole GPUNode (with status) for ``s``: what the agent's writes amount to. Tests
    of the scheduling side use it to stand in for a running agent, e.g.
    ``gpunode_for("node1", sample(FixtureBackend.load("h100-sxm-8")), now)``."""
    g = new_gpunode(node_name, node_uid)
    g["status"] = build_status(s, heartbeat)
    return g
