"""What a GPUWorkload's Job holds, read from the Job alone.

In Job mode each replica is a batch/v1 Job whose pod template is already bound to
its node and names its devices. The Job controller (kube-controller-manager) makes
the pod, at a moment of its own choosing: until the Job has finished or is gone
from the API, a pod of it may still appear on those devices, even after every pod
the ledger has seen of it is gone (the Job was just created; or the Job controller
acted on a copy of the Job older than its deletion). So an unfinished Job of ours
holds what its template names, like a pod, until it is deleted from the API or has
a ``Complete``/``Failed`` condition (a finished Job never makes another pod; its
pods that still run hold on their own). Deleted in the foreground, a Job is gone
only once the garbage collector has seen none of its pods left.

Only Jobs of ours count: those a GPUWorkload controls, and those the garbage
collector orphaned from one (``--cascade=orphan``; read from the workload UID label
we gave them, as their pods are). Their owner is that workload's attempt
(``<workload uid>#<attempt>``), the same owner as its booking and its pods, so a
Job never conflicts with its own workload. Everything is parsed defensively: a
malformed annotation raises ``BadPod`` for the caller to report.
"""

from __future__ import annotations

from api.v1alpha1.keys import ATTEMPT_LABEL, DEVICES_ANNOTATION, WORKLOAD_UID_LABEL
from internal.objects import JSON, object_key
from internal.scheduling.pods import (
    PodHolding,
    controller_ref,
    parse_devices,
    pod_gpu_request,
    with_portion,
    workload_owner,
)

#: how a Job's holding is named in messages ("held by Job ns/train-0")
JOB_PREFIX = "Job "


class JobHolding(PodHolding):
    """What one unfinished Job of a GPUWorkload holds (``uid`` is the Job's)."""

    @property
    def key(self) -> str:
        return job_holder_key(self.uid)


def job_holder_key(uid: str) -> str:
    return f"job:{uid}"


def job_uid(job: JSON) -> str:
    meta = job.get("metadata") or {}
    return str(meta.get("uid") or object_key(job))


def job_finished(job: JSON) -> bool:
    """Has the Job a ``Complete`` or ``Failed`` condition that is True?"""
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or ())


def job_holding(job: JSON) -> JobHolding | None:
    """What ``job`` holds now: None when a GPUWorkload does not control it, when it
    has finished, or when its template is unbound or holds no GPU. Raises BadPod
    when its template's devices annotation is malformed."""
    workload = _workload_uid(job)
    if not workload or job_finished(job):
        return None
    template = (job.get("spec") or {}).get("template") or {}
    node = (template.get("spec") or {}).get("nodeName")
    if not node:
        return None
    tmeta = template.get("metadata") or {}
    devices = tuple(parse_devices((tmeta.get("annotations") or {}).get(DEVICES_ANNOTATION))
                    or ())
    counted = max(0, pod_gpu_request(template) - len(devices))
    if not devices and not counted:
        return None
    labels = (job.get("metadata") or {}).get("labels") or tmeta.get("labels") or {}
    owner = workload_owner(workload, labels.get(ATTEMPT_LABEL))
    return with_portion(JobHolding(job_uid(job), f"{JOB_PREFIX}{object_key(job)}", str(node),
                                   devices, counted, owner), tmeta.get("annotations") or {})


def _workload_uid(job: JSON) -> str:
    """The UID of the GPUWorkload whose Job this is: its controller; or, for a Job
    the garbage collector orphaned (``--cascade=orphan`` took its ownerReference
    away), the workload UID label we gave it, as its pods have. '' when neither."""
    ref = controller_ref(job)
    if ref is not None:
        return str(ref.get("uid") or "") if ref.get("kind") == "GPUWorkload" else ""
    if (job.get("metadata") or {}).get("ownerReferences"):
        return ""
    return str(((job.get("metadata") or {}).get("labels") or {}).get(WORKLOAD_UID_LABEL) or "")


def is_job_holder(name: str) -> bool:
    """Is ``name`` (from ``Ledger.blockers``/``holders``) a Job's holding?"""
    return name.startswith(JOB_PREFIX)
