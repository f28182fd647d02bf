"""Shared reads of the commands that show the GPU picture."""

from __future__ import annotations

import argparse

from internal.cli import inventory
from internal.cli.kube import JSON, Kube
from internal.scheduling.inventory import DEFAULT_STALE_AFTER


def add_stale_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpunode-stale-after", type=float,
                   default=DEFAULT_STALE_AFTER.total_seconds(), metavar="SECONDS",
                   help="seconds without an agent heartbeat before a node's GPUs count as "
                        "stale (not free); match the manager's flag of the same name "
                        "(default %(default)s)")


def gpu_view(kube: Kube, stale_after: float | None = None
             ) -> tuple[list[inventory.NodeGPUs], list[JSON]]:
    """Devices per node and every GPUWorkload of the cluster (holders come from all
    namespaces, whatever ``-n`` says: a device is held cluster-wide). Free, unhealthy
    and stale devices are judged by the controller's code (see inventory)."""
    workloads = kube.workloads(all_namespaces=True)
    view = inventory.node_gpus(kube.nodes(), kube.gpunodes(), workloads,
                               kube.pods(field_selector="status.phase!=Succeeded,"
                                                        "status.phase!=Failed"),
                               stale_after=DEFAULT_STALE_AFTER if stale_after is None
                               else stale_after)
    return view, workloads


def in_scope(args: argparse.Namespace, kube: Kube, workloads: list[JSON]) -> list[JSON]:
    if kube.all_namespaces:
        return workloads
    return [w for w in workloads if w["metadata"].get("namespace") == kube.namespace]
