"""Releasing a ResourceClaim of ours (``deviceExposure: dra``, step 5 of
controllers/dra/claims.py): its allocation is removed (and ``reservedFor`` with it), then
our finalizer, then the claim. Used by the claim controller for every claim no
booking wants and no pod uses, and, in a manager running without DRA, by a dra
workload's deletion once its pods are gone, so that its claims are not left
allocated for pods that no longer exist (and its namespace can be deleted) while no
claim controller runs. Each step is repaired by the next call if one fails."""

from __future__ import annotations

import contextlib
from typing import Any

import structlog

from api.v1alpha1.keys import CLAIM_FINALIZER, WORKLOAD_UID_LABEL
from internal.objects import JSON
from internal.scheduling.resourceslices import DRA_API_VERSION
from runtime import NotFound

log = structlog.get_logger("claims")



def release_claim(client: Any, claim: JSON) -> None:
    """Deallocates ``claim``, drops our finalizer, deletes it (gone already: done)."""
    meta = claim["metadata"]
    ns, name = meta["namespace"], meta["name"]
    with contextlib.suppress(NotFound):
        status = claim.get("status") or {}
        if status.get("allocation") or status.get("reservedFor"):
            claim = client.update_status(
                {**claim, "status": {**status, "allocation": None, "reservedFor": None}})
            log.info("claim.deallocated", claim=f"{ns}/{name}")
        rest = [f for f in claim["metadata"].get("finalizers") or () if f != CLAIM_FINALIZER]
        if CLAIM_FINALIZER in (claim["metadata"].get("finalizers") or ()):
            claim = client.patch(
                DRA_API_VERSION, "ResourceClaim", name,
                {"metadata": {"finalizers": rest or None,
                              "resourceVersion": claim["metadata"]["resourceVersion"]}},
                namespace=ns, patch_type="merge")
        if not claim["metadata"].get("deletionTimestamp"):
            client.delete(DRA_API_VERSION, "ResourceClaim", name, namespace=ns)
        log.info("claim.released", claim=f"{ns}/{name}")


def release_workload_claims(client: Any, workload: JSON) -> list[str]:
    """Every claim of ours made for ``workload`` (by its UID label), released; to be
    called only once none of its pods is left. Returns their names."""
    meta = workload["metadata"]
    claims = client.list_all(DRA_API_VERSION, "ResourceClaim", meta["namespace"],
                             label_selector=f"{WORKLOAD_UID_LABEL}={meta['uid']}")
    names = []
    for claim in claims.get("items") or ():  # a list's items name no kind
        release_claim(client, {**claim, "apiVersion": DRA_API_VERSION,
                               "kind": "ResourceClaim"})
        names.append(claim["metadata"]["name"])
    return names
