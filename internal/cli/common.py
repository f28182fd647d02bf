"""Shared reads of the commands that show the GPU picture."""

from __future__ import annotations

import argparse

from internal.cli import inventory
from internal.cli.kube import JSON, Kube


def gpu_view(kube: Kube) -> tuple[list[inventory.NodeGPUs], list[JSON]]:
    """Devices per node and every GPUWorkload of the cluster (holders come from all
    namespaces, whatever ``-n`` says: a device is held cluster-wide)."""
    workloads = kube.workloads(all_namespaces=True)
    view = inventory.node_gpus(kube.nodes(), kube.gpunodes(), workloads,
                               kube.pods(field_selector="status.phase!=Succeeded,"
                                                        "status.phase!=Failed"))
    return view, workloads


def in_scope(args: argparse.Namespace, kube: Kube, workloads: list[JSON]) -> list[JSON]:
    if kube.all_namespaces:
        return workloads
    return [w for w in workloads if w["metadata"].get("namespace") == kube.namespace]
