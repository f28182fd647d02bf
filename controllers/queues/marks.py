"""The queues' marks on namespaces: what the queue admission policies read instead of
the GPUQueues themselves (``api/v1alpha1/queue_policies.py`` says why).

For each namespace the namespace-marks controller keeps

- the label ``gpu.orchestrator.dev/queued=true`` while a GPUQueue selects it (the
  policies' ``namespaceSelector`` matches on it), and
- the annotation ``gpu.orchestrator.dev/queues``: every GPUQueue that selects it, by
  name, comma-separated; the first is the default queue of its workloads, as the
  gate resolves it (``QueueBook.selecting``),

and removes both once no queue selects it. A namespace is looked at when it changes
and, every one, when a GPUQueue is created, deleted or its spec changes.

| the namespace                                  | what the controller does                |
| ---------------------------------------------- | --------------------------------------- |
| gone, or being deleted                         | nothing                                 |
| a system one (kube-system, ...)                | nothing: never marked                   |
| marks as the queues say                        | nothing                                 |
| marks that differ                              | one merge patch (with the namespace's   |
|                                                | resourceVersion: a conflict requeues;   |
|                                                | a refusal is logged, tried again in     |
|                                                | ``REFUSED_RETRY`` seconds)              |

Only the manager writes the marks (the ``queue-namespace-marks`` policy refuses
anyone else but a cluster admin, and the manager any other change of a Namespace).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from api.v1alpha1.keys import QUEUED_LABEL, QUEUES_ANNOTATION
from api.v1alpha1.policies import SYSTEM_NAMESPACES
from api.v1alpha1.queue_policies import QUEUED
from controllers.queues.book import QueueBook
from runtime import Conflict, Forbidden, NotFound, Request, Result

log = structlog.get_logger("queues.marks")

JSON = Mapping[str, Any]
#: seconds before a refused write of the marks is tried again
REFUSED_RETRY = 60.0
Marks = tuple[str | None, str | None]


def marks_of(namespace: JSON) -> Marks:
    """(label, annotation) as the namespace carries them."""
    md = namespace.get("metadata") or {}
    return ((md.get("labels") or {}).get(QUEUED_LABEL),
            (md.get("annotations") or {}).get(QUEUES_ANNOTATION))


def wanted(queues: tuple[str, ...]) -> Marks:
    """(label, annotation) for a namespace that ``queues`` select, by name."""
    return (QUEUED, ",".join(queues)) if queues else (None, None)


def shadowed(book: QueueBook, queue: str) -> dict[str, str]:
    """namespace -> the queue its workloads go to by default, for every namespace
    ``queue`` selects where another queue comes first by name."""
    queues = book.queues()
    out = {}
    for ns in book.namespaces():
        names = book.selecting(ns, queues)
        if queue in names and names[0] != queue:
            out[ns] = names[0]
    return out


class NamespaceMarks:
    """Keeps a namespace's marks as its queues say (the table above)."""

    def __init__(self, client: Any, book: QueueBook, namespaces: Any) -> None:
        self.client, self.book, self.namespaces = client, book, namespaces

    def reconcile(self, req: Request) -> Result | None:
        raw = self.namespaces.get_by_name(req.name)
        if raw is None or req.name in SYSTEM_NAMESPACES or \
                (raw.get("metadata") or {}).get("deletionTimestamp"):
            return None
        want, have = wanted(self.book.selecting(req.name)), marks_of(raw)
        if want == have:
            return None
        patch = {"metadata": {
            "resourceVersion": raw["metadata"].get("resourceVersion"),
            "labels": {QUEUED_LABEL: want[0]},
            "annotations": {QUEUES_ANNOTATION: want[1]}}}
        try:
            self.client.patch("v1", "Namespace", req.name, patch)
        except NotFound:
            return None
        except Conflict:
            return Result(requeue=True)  # the cache is behind: its event comes
        except Forbidden as exc:  # RBAC or a policy older than this manager
            log.warning("queues.namespace.mark_refused", namespace=req.name, error=str(exc),
                        effect="the queue admission policies do not hold this namespace")
            return Result(requeue_after=REFUSED_RETRY)
        log.info("queues.namespace.marked", namespace=req.name, queues=want[1] or "",
                 was=have[1] or "")
        return None


def every_namespace(book: QueueBook) -> Any:
    """A GPUQueue's event: every namespace may have come into or out of it."""
    def fn(_: JSON) -> list[Request]:
        return [Request("", ns) for ns in book.namespaces()]
    return fn
