"""The pods of a Job-mode child, as this controller sees them.

A Job's replica runs in a pod the Job controller makes; whether it runs is read
from that pod, never from the Job's ``status.active``/``status.ready``: those are
kube-controller-manager's summary, which it may leave stale (seen after a
kube-apiserver restart: ``{"active": 1, "ready": 0}`` for minutes while the pod was
Running and Ready). Guarantees:

- A Job's pods are the cached pods whose controller reference is the Job's UID
  (the pod cache's ``owner-uid`` index: no listing per reconcile); a label never
  makes a pod a Job's.
- Every event of such a pod enqueues the workload that controls the Job
  (``workload_of_job_pod``), so a pod that starts wakes its workload even when the
  Job's status never changes.
"""

from __future__ import annotations

from collections.abc import Callable

from internal.objects import JSON
from internal.scheduling.pods import controller_ref
from runtime import Request
from runtime.client import split_api_version
from runtime.store import OWNER_UID_INDEX, Indexer


def pods_of_job(pods: Indexer, job: JSON) -> list[JSON]:
    """The cached pods the Job controls (by UID)."""
    uid = (job.get("metadata") or {}).get("uid")
    if not uid:
        return []
    return [p for p in pods.by_index(OWNER_UID_INDEX, uid)
            if (controller_ref(p) or {}).get("uid") == uid]


def workload_of_job_pod(jobs: Indexer, owner_api_version: str, owner_kind: str
                        ) -> Callable[[JSON], list[Request]]:
    """A map function for pod events: a pod controlled by a cached Job that is
    controlled by an ``owner_kind`` maps to that owner. A pod seen before its Job
    maps to nothing: the Job's own event enqueues the workload, whose reconcile then
    reads the pod from the cache."""
    group, _ = split_api_version(owner_api_version)

    def fn(pod: JSON) -> list[Request]:
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "Job" or \
                split_api_version(ref.get("apiVersion", ""))[0] != "batch":
            return []
        ns = (pod.get("metadata") or {}).get("namespace") or ""
        job = jobs.get_by_name(ref.get("name", ""), ns)
        if job is None or (job.get("metadata") or {}).get("uid") != ref.get("uid"):
            return []
        owner = controller_ref(job)
        if owner is None or owner.get("kind") != owner_kind or \
                split_api_version(owner.get("apiVersion", ""))[0] != group:
            return []
        return [Request(ns, owner["name"])]
    return fn
