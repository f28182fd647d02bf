"""Waiting in a queue is not failing: a workload in a GPUQueue that cannot be
admitted now (its quota, or the devices) stays Pending with the reason and spends
no retry of its ``retryPolicy``, which counts only attempts that failed once
admitted (docs/api.md, "Waiting in a queue"). A workload in no queue keeps the
retry policy's meaning for unschedulable attempts (``Placer._unschedulable``,
controllers/gpuworkload/placing.py).

It is woken when devices are released (as every waiting workload) and when a
GPUQueue changes; the requeue below is a backstop only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.v1alpha1.types import Phase
from controllers.gpuworkload.reconcile_outcome import Outcome
from controllers.status.builder import StatusBuilder
from controllers.status.conditions import SCHEDULED
from internal.scheduling.framework import Decision
from runtime import Result

#: a queued workload that waits for devices its quota allows
WAITING_FOR_CAPACITY = "WaitingForCapacity"
#: backstop: a waiting workload is looked at again at least this often (seconds)
RECHECK_AFTER = 30.0


def wait_in_queue(raw: Mapping[str, Any], status: StatusBuilder, decision: Decision) -> Outcome:
    """Pending, ``Scheduled=False`` with the queue's reason; an Event when the
    message changes; no retry spent, and no retry timer."""
    reason = decision.wait_reason or WAITING_FOR_CAPACITY
    message = decision.message
    if not decision.wait_reason:
        message = f"queue {decision.queue} admits it, waiting for devices: {message}"
    old = (raw.get("status") or {})
    status.placements(None).retry(next_retry=None).phase(Phase.PENDING, message)
    status.condition(SCHEDULED, False, reason, message)
    out = Outcome(status, Result(requeue_after=RECHECK_AFTER))
    if old.get("message") != message:
        out.warn(reason, message)
    return out
