"""Whether ``deviceExposure: dra`` can be served, and what a workload asking for it is
told when it cannot.

Two reasons it cannot: the controller runs without ``--enable-dra``, or the API
server does not serve ``resource.k8s.io/v1`` (DRA is GA from Kubernetes 1.34; an
older cluster, or one started with ``--runtime-config=resource.k8s.io/v1=false``).
Guarantees:

- ``dra_unavailable`` asks discovery once, at setup. Only an API server that answers
  404 for the group version, or serves it without ResourceSlices or ResourceClaims,
  makes DRA unavailable; any other failure (the server unreachable for a moment)
  leaves it on, and its informers retry as every informer does. So a cluster without
  DRA never gets informers that cannot sync (the manager would wait for them, log a
  relist error every few seconds, and exit at its cache-sync timeout: a crash loop).
- ``DraUnavailableGate`` wraps the GPUWorkload reconcile: a workload that would be
  exposed through DRA (its ``deviceExposure``, else the controller's default) and was
  never placed gets ``Scheduled=False DRAUnavailable`` with a message saying why, and
  one Warning Event per new message, instead of waiting forever for ResourceSlices.
  It stays Pending until its spec changes (a spec edit is an event that reconciles
  it again) or the controller restarts with DRA available. Everything else goes to
  the reconciler unchanged: a placed workload, or one with children (left running
  as it is: controllers/gpuworkload/unmanaged.py), one being deleted, a finished
  one, an invalid spec (its ``InvalidSpec`` says more).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog
from pydantic import ValidationError

from api.v1alpha1.types import API_VERSION, DeviceExposure, GPUWorkload, Phase
from controllers.status.builder import StatusBuilder, same_status
from controllers.status.conditions import SCHEDULED, get_condition
from internal.objects import JSON
from internal.scheduling.resourceslices import DRA_API_VERSION
from runtime import NotFound, Request, Result
from runtime.errors import ApiError, Forbidden
from runtime.events import EventRecorder
from runtime.store import Indexer

log = structlog.get_logger("dra")


REASON = "DRAUnavailable"
NOT_ENABLED = "the controller runs without --enable-dra"
#: the kinds DRA exposure reads and writes
KINDS = ("ResourceSlice", "ResourceClaim")


def dra_unavailable(client: Any) -> str | None:
    """Why the API server cannot serve DRA exposure (a sentence), or None when it
    can, or when discovery failed for another reason than 404 (the informers retry)."""
    try:
        for kind in KINDS:
            client.resource_for(DRA_API_VERSION, kind)
    except NotFound as exc:
        return (f"the API server does not serve {DRA_API_VERSION} ({kind}: {exc}); "
                f"it is GA and on by default from Kubernetes 1.34")
    except ApiError as exc:
        log.warning("dra.discovery.failed", api_version=DRA_API_VERSION, code=exc.status,
                    error=str(exc))
    return None


#: why a member not made yet cannot be planned in ``dra`` mode when the manager may
#: not read ResourceClaimTemplates (the DRA role of an older release)
TEMPLATES_FORBIDDEN = ("the manager may not read ResourceClaimTemplates (apply the current "
                       "config/rbac/dra_role.yaml), so a member not made yet cannot be "
                       "planned in dra mode")


def templates_readable(client: Any) -> bool:
    """May the manager list ResourceClaimTemplates? False only on a 403: the DRA role
    of an older release, applied with this manager (an informer it may not list
    would never sync, and the manager would stop at its cache-sync timeout: a crash
    loop). Said once, here; any other failure leaves the informer to retry."""
    try:
        client.list(DRA_API_VERSION, "ResourceClaimTemplate", limit=1)
    except Forbidden as exc:
        log.warning("dra.templates.forbidden", error=str(exc),
                    effect="a dra pod group placed before every member exists is "
                           "refused; apply the current config/rbac/dra_role.yaml")
        return False
    except Exception as exc:  # unreachable for a moment, ...: the informer retries
        log.warning("dra.templates.list_failed", error=str(exc))
    return True


def _now() -> datetime:
    return datetime.now(UTC)


class DraUnavailableGate:
    """A reconciler: DRA workloads that cannot be served are told so (module
    docstring); every other request goes to ``reconcile``.

    ``submit(raw, status)`` hands a status over (the status writer's ``submit``, or a
    synchronous write) and ``pending(raw)`` says what was handed over and is not in the
    cache yet (the writer's ``view``; None: nothing); ``recorder`` sends the Event."""

    def __init__(self, reconcile: Callable[[Request], Result | None], workloads: Indexer,
                 default_exposure: DeviceExposure, why: str, recorder: EventRecorder,
                 submit: Callable[[JSON, dict[str, Any]], None],
                 pending: Callable[[JSON], JSON | None] = lambda raw: None,
                 clock: Callable[[], datetime] = _now,
                 has_children: Callable[[JSON], bool] = lambda raw: False) -> None:
        self.inner, self.workloads, self.default_exposure = reconcile, workloads, \
            default_exposure
        #: whether a workload has children (a pod whose status write was lost is
        #: still its placement: the reconciler leaves it running, it is not refused)
        self.has_children = has_children
        self.message = f"deviceExposure dra is unavailable: {why}"
        self.recorder, self.submit, self.pending, self.clock = recorder, submit, pending, clock

    def reconcile(self, req: Request) -> Result | None:
        raw = self.workloads.get_by_name(req.name, req.namespace)
        if raw is None or not self._refuses(raw):
            return self.inner(req)
        raw = self.pending(raw) or raw  # our own status, handed over, not cached yet
        status = StatusBuilder(raw, self.clock())
        status.phase(Phase.PENDING, self.message).condition(SCHEDULED, False, REASON,
                                                            self.message)
        old = raw.get("status") or {}
        built = status.build()
        if same_status(old, built):
            return None
        self.submit(raw, built)
        told = get_condition(old, SCHEDULED) or {}
        if (told.get("reason"), told.get("message")) != (REASON, self.message):
            self.recorder.warning(raw, REASON, self.message)
            log.info("workload.dra_unavailable", workload=f"{req.namespace}/{req.name}")
        return None

    def _refuses(self, raw: JSON) -> bool:
        meta, status = raw.get("metadata") or {}, raw.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("placements") or \
                status.get("phase") in (Phase.SUCCEEDED.value, Phase.FAILED.value):
            return False
        named = (raw.get("spec") or {}).get("deviceExposure")
        if (named or self.default_exposure.value) != DeviceExposure.DRA.value:
            return False  # the hot path: no second parse of the spec
        try:
            GPUWorkload.model_validate(raw)
        except ValidationError:
            return False
        return not self.has_children(raw)


def status_submitter(client: Any) -> Callable[[JSON, dict[str, Any]], None]:
    """A synchronous status write (for a manager without the status writer)."""
    def submit(raw: JSON, status: dict[str, Any]) -> None:
        meta = raw["metadata"]
        with contextlib.suppress(NotFound):  # gone meanwhile
            client.patch(API_VERSION, "GPUWorkload", meta["name"], {"status": status},
                         namespace=meta["namespace"], patch_type="merge",
                         subresource="status")
    return submit
