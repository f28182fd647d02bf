"""Shared reads of the commands that show the GPU picture."""

from __future__ import annotations

import argparse

from internal.cli import inventory, validate
from internal.cli.kube import CliError, Forbidden, Kube
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
    """Devices per node and the GPUWorkloads, as the controller's ledger has them (see
    inventory). Holders come from every namespace, whatever ``-n`` says (a device is
    held cluster-wide), where the caller may list them there; else from its namespace
    alone, and the picture says so (``holders_from``): a tenant sees its own holders by
    name and no other namespace's (docs/security.md, "What a tenant sees")."""
    nodes, gpunodes = kube.nodes(), kube.gpunodes()
    scope: str | None = None
    try:
        workloads = kube.workloads(all_namespaces=True)
    except Forbidden:
        scope = kube.namespace
        workloads = kube.workloads(namespace=scope, all_namespaces=False)
    slices, claims = _dra_objects(kube, scope)
    pic = inventory.picture(nodes, gpunodes, workloads,
                            kube.pods(scope, field_selector="status.phase!=Succeeded,"
                                                            "status.phase!=Failed"),
                            stale_after=DEFAULT_STALE_AFTER if stale_after is None
                            else stale_after, jobs=kube.workload_jobs(scope),
                            slices=slices, claims=claims, driver=driver, holders_from=scope)
    return pic, workloads


def holders_note(pic: inventory.Picture) -> str | None:
    """The line a view prints when it sees one namespace's holders only. Nothing a
    viewer may read cluster-wide (GPUNodes, Nodes, ResourceSlices, GPUQueues) says
    which devices other namespaces hold, so the view does not say free."""
    if pic.holders_from is None:
        return None
    ns = pic.holders_from
    return (f"holders: namespace {ns} only (you may not list pods and GPUWorkloads in "
            f"every namespace): a device no holder of namespace {ns} holds shows unknown, "
            "not free: another namespace may hold it; FREE counts are upper bounds (<=N) "
            "and ALLOCATED lower bounds (>=N)")


def _dra_objects(kube: Kube, scope: str | None) -> tuple[list[JSON], list[JSON]]:
    """ResourceSlices and the ResourceClaims of every namespace (or ``scope``); none
    where the API does not serve them or the user may not read them."""
    out: list[list[JSON]] = []
    for read in (kube.resource_slices, lambda: kube.claims(scope)):
        try:
            out.append(read())
        except CliError:
            out.append([])
    return out[0], out[1]


def in_scope(args: argparse.Namespace, kube: Kube, workloads: list[JSON]) -> list[JSON]:
    if kube.all_namespaces:
        return workloads
    return [w for w in workloads if w["metadata"].get("namespace") == kube.namespace]
