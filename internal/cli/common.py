"""Shared reads of the commands that show the GPU picture."""

from __future__ import annotations

import argparse

from internal.cli import inventory, validate
from internal.cli.kube import CliError, Kube
from internal.objects import JSON
from internal.scheduling.inventory import DEFAULT_STALE_AFTER
from internal.scheduling.resourceslices import DEFAULT_DRIVER


def add_view_flags(p: argparse.ArgumentParser) -> None:
    """The manager's flags that change what it counts: match them here."""
    p.add_argument("--gpunode-stale-after", type=validate.positive_duration,
                   default=DEFAULT_STALE_AFTER.total_seconds(), metavar="DURATION",
                   help="how long without an agent heartbeat before a node's GPUs count as "
                        "stale (not free): seconds, or 90s, 2m; more than 0; match the "
                        "manager's flag of the same name (default %(default)s seconds)")
    p.add_argument("--dra-driver", default=DEFAULT_DRIVER, metavar="DRIVER",
                   type=validate.nonempty("--dra-driver"),
                   help="the DRA driver whose ResourceSlices publish the GPUs and whose "
                        "allocated ResourceClaims hold them; match the manager's flag of "
                        "the same name (default %(default)s)")


def gpu_view(kube: Kube, stale_after: float | None = None, driver: str = DEFAULT_DRIVER
             ) -> tuple[inventory.Picture, list[JSON]]:
    """Devices per node and every GPUWorkload of the cluster (holders come from all
    namespaces, whatever ``-n`` says: a device is held cluster-wide), as the
    controller's ledger has them (see inventory)."""
    workloads = kube.workloads(all_namespaces=True)
    slices, claims = _dra_objects(kube)
    pic = inventory.picture(kube.nodes(), kube.gpunodes(), workloads,
                            kube.pods(field_selector="status.phase!=Succeeded,"
                                                     "status.phase!=Failed"),
                            stale_after=DEFAULT_STALE_AFTER if stale_after is None
                            else stale_after, jobs=kube.workload_jobs(),
                            slices=slices, claims=claims, driver=driver)
    return pic, workloads


def _dra_objects(kube: Kube) -> tuple[list[JSON], list[JSON]]:
    """ResourceSlices and every namespace's ResourceClaims; none where the API does
    not serve them or the user may not read them (the picture is then without DRA)."""
    try:
        return kube.resource_slices(), kube.claims()
    except CliError:
        return [], []


def in_scope(args: argparse.Namespace, kube: Kube, workloads: list[JSON]) -> list[JSON]:
    if kube.all_namespaces:
        return workloads
    return [w for w in workloads if w["metadata"].get("namespace") == kube.namespace]
