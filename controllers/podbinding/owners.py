"""The owners a pod group's size is read from (``internal/scheduling/podgroups.py``):
Jobs always, JobSets and LeaderWorkerSets where the API server serves them, each
through an informer's cache (no request per reconcile).

A peer's API that is not served when the manager starts is not watched (an informer
of it would never sync, and the manager would stop at its cache-sync timeout): its
pods' groups are then refused as unreadable (``PodGroupSizeUnreadable``, naming the
object), and the manager reads them once restarted after the peer is installed.
"""

from __future__ import annotations

from typing import Any

import structlog

from internal.objects import JSON
from internal.scheduling.podgroups import JOBSET_API, LWS_API, OwnerLookup
from runtime import Manager, NotFound
from runtime.errors import ApiError

log = structlog.get_logger("podbinding")

#: (apiVersion, kind) of the owners a group's size may be read from
OWNERS = (("batch/v1", "Job"), (JOBSET_API, "JobSet"), (LWS_API, "LeaderWorkerSet"))


def served(client: Any, api_version: str, kind: str) -> bool:
    """Does the API server serve ``kind``? (A discovery error other than 404 says
    yes: the informer retries.)"""
    try:
        client.resource_for(api_version, kind)
    except NotFound:
        return False
    except ApiError as exc:
        log.warning("podgroups.discovery.failed", kind=kind, code=exc.status, error=str(exc))
    return True


def owner_lookup(mgr: Manager) -> OwnerLookup:
    """Looks owners up in the caches of the kinds the API server serves."""
    caches: dict[tuple[str, str], Any] = {}
    for api_version, kind in OWNERS:
        if api_version != "batch/v1" and not served(mgr.client, api_version, kind):
            log.info("podgroups.owner_not_served", kind=kind, api_version=api_version,
                     effect=f"the groups of {kind} pods are refused as unreadable until "
                            f"the manager is restarted with {kind} installed")
            continue
        caches[(api_version, kind)] = mgr.informer_for(api_version, kind).indexer

    def lookup(api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        cache = caches.get((api_version, kind))
        return cache.get_by_name(name, namespace) if cache is not None else None
    return lookup
