"""A status write the API server refuses for good: which refusals those are, and how
the status writer reports one (it sends such a write once, ``controllers/status/writer.py``).

Reported three ways, as kube-scheduler reports a pod it cannot bind: a Warning Event
``StatusRefused`` on the workload with the code and the API server's message (what
``kubectl describe gw`` shows), ``gpu_orchestrator_status_writes_dropped_total{reason}``,
and a warning in the log.
"""

from __future__ import annotations

from typing import Any

import structlog

from api.v1alpha1.types import API_VERSION
from internal import metrics as m
from internal.objects import JSON
from runtime.errors import ApiError

log = structlog.get_logger("status_writer")

#: Refusals given up on, by code. Each judges the request itself, so the same write
#: gets the same answer however often it is sent: 400 (the patch cannot be read),
#: 403 (RBAC, or an admission webhook or policy that forbids it: a change of those is
#: met by the next reconcile's write, not by resending this one every 10 s), 413
#: (the status is too large) and 422 (the status fails the CRD's schema or a
#: validation policy; a failed UID test is told apart in ``patches.patch_status``).
#: 404 is the workload gone (the writer drops it as such). 409, 429, 5xx, a
#: connection error (code 0) and anything else pass with time: retried with backoff.
PERMANENT = {400: "BadRequest", 403: "Forbidden", 413: "RequestEntityTooLarge",
             422: "Invalid"}

#: the Warning Event on a workload whose status write was given up on
STATUS_REFUSED = "StatusRefused"


def for_good(exc: BaseException) -> ApiError | None:
    """``exc`` if it refuses the write for good, else None (retried)."""
    return exc if isinstance(exc, ApiError) and exc.status in PERMANENT else None


def report(recorder: Any, obj: JSON, exc: ApiError) -> None:
    """Reports that the status write of ``obj`` (a GPUWorkload, cached or a
    reference: ``metadata`` with name, namespace and UID) was given up on."""
    reason = PERMANENT[exc.status]
    meta = obj.get("metadata") or {}
    m.STATUS_DROPPED.labels(reason).inc()
    log.warning("status.write_refused", workload=f"{meta.get('namespace')}/{meta.get('name')}",
                code=exc.status, reason=reason, error=exc.message,
                effect="not sent again; the next reconcile writes again")
    recorder.warning({"apiVersion": API_VERSION, "kind": "GPUWorkload", **obj},
                     STATUS_REFUSED,
                     f"status not written: the API server answered {exc.status} {reason}: "
                     f"{exc.message or exc.reason}; it is not sent again until the workload "
                     "is reconciled")
