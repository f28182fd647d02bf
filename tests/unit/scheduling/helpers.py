"""Builders of raw Node / GPUNode / GPUWorkload dicts for scheduling tests."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.types import GPUWorkload
from internal.scheduling import Ledger, Snapshot

SEED_MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3"


def node(
    name: str,
    gpus: int = 4,
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def gpunode(
    name: str,
    gpus: int = 4,
    *,
    memory: int = 81920,
    unhealthy: tuple[int, ...] = (),
    links: dict[int, list[int]] | None = None,
) -> dict[str, Any]:
    links = links or {}
    return {
        "metadata": {"name": name},
        "status": {
            "topologyKnown": bool(links),
            "devices": [
                {
                    "index": i,
                    "uuid": f"GPU-{name}-{i}",
                    "memoryTotalMiB": memory,
                    "healthy": i not in unhealthy,
                    "nvlinkPeers": links.get(i, []),
                }
                for i in range(gpus)
            ],
        },
    }


def workload(
    name: str = "w",
    *,
    ns: str = "default",
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> GPUWorkload:
    return GPUWorkload.model_validate(
        {
            "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
            "spec": spec,
        }
    )


def cluster(
    *nodes: dict[str, Any], gpunodes: tuple[dict[str, Any], ...] = ()
) -> tuple[Snapshot, Ledger]:
    ledger = Ledger()
    return Snapshot.build(nodes, gpunodes, ledger), ledger


def four_nodes(gpus: int = 4) -> tuple[Snapshot, Ledger]:
    return cluster(*(node(f"node{i}", gpus) for i in range(1, 5)))


def foreign_pod(ledger: Any, key: str, node: str, gpus: int) -> None:
    """A pod the controller did not create, requesting ``gpus`` on ``node`` (0: gone)."""
    from internal.scheduling.pods import PodHolding

    if gpus <= 0:
        ledger.remove_pod(key)
        return
    ledger.set_pod(PodHolding(key, key, node, (), gpus, f"pod:{key}"))


DRA_DRIVER = "gpu.nvidia.com"


def dra_slice(node: str, gpus: int, *, generation: int = 1, driver: str = DRA_DRIVER,
              name: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name or f"{node}-{driver}-{generation}"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}",
                                  "attributes": {"uuid": {"string": f"GPU-{node}-{i}"},
                                                 "productName": {"string": "NVIDIA H100"},
                                                 "minor": {"int": i}},
                                  "capacity": {"memory": {"value": "80Gi"}}}
                                 for i in range(gpus)]}}


def dra_claim(uid: str, node: str, *devices: str, owner: dict | None = None,
              attempt: str = "0") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"c-{uid}", "namespace": "ns", "uid": uid,
                            "labels": {"gpu.orchestrator.dev/attempt": attempt}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta, "status": {"allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRA_DRIVER, "pool": node,
                                 "device": d} for d in devices]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}
