"""Asking one seed-path pod to go through the Eviction API, so the
PodDisruptionBudgets over it hold (docs/podbinding.md)."""

from __future__ import annotations

import time
from typing import Any

import structlog

from controllers.podbinding.seedbook import pod_meta
from internal.objects import JSON
from runtime import NotFound
from runtime.errors import ApiError
from runtime.events import EventRecorder

log = structlog.get_logger("podbinding")

#: seconds an eviction may take, retries included (a refusal is asked again later)
EVICT_DEADLINE = 5.0


def evict_pod(client: Any, recorder: EventRecorder, pod: JSON, key: str) -> bool:
    """POSTs an Eviction for ``pod`` (by UID); True when it was accepted or the pod
    is gone; a refusal is said on the pod (``EvictionFailed``)."""
    meta = pod_meta(pod)
    ns = meta.get("namespace") or "default"
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": meta.get("name"), "namespace": ns},
                "deleteOptions": {"preconditions": {"uid": meta.get("uid")}}}
    try:
        # a PodDisruptionBudget's refusal is said at once, not retried for long
        client.create_subresource("v1", "Pod", meta.get("name"), "eviction",
                                  eviction, namespace=ns,
                                  deadline=time.monotonic() + EVICT_DEADLINE)
    except NotFound:
        return True  # gone already
    except ApiError as exc:
        log.warning("pod.evict.failed", pod=key, code=exc.status, error=str(exc))
        recorder.warning(pod, "EvictionFailed", f"could not evict the pod: {exc}")
        return False
    log.info("pod.evicted", pod=key)
    return True
