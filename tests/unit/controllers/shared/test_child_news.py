"""A child's update wakes its GPUWorkload only when it changes something a reconcile
reads of it (controllers/shared/child_news.py): another component's annotation, or
a kubelet's status write that leaves the pod Pending, wakes nobody; a phase, a
rejection, our annotations, labels, the owner, the spec or a deletion does."""

from __future__ import annotations

import copy
from typing import Any

from controllers.shared.child_news import ChildNews, owner_reads
from runtime.predicates import CreateEvent, DeleteEvent, UpdateEvent


def pod(rv: int = 10, **status: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w-0", "namespace": "ns", "uid": "pod-1",
                         "resourceVersion": str(rv),
                         "labels": {"gpu.orchestrator.dev/attempt": "0",
                                    "gpu.orchestrator.dev/replica-index": "0"},
                         "annotations": {"gpu.orchestrator.dev/devices": "0"},
                         "ownerReferences": [{"uid": "w-uid", "controller": True}]},
            "spec": {"nodeName": "node1", "containers": [{"name": "c"}]},
            "status": status or {"phase": "Pending"}}


def job(rv: int = 10, conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "w-0", "namespace": "ns", "uid": "job-1",
                         "resourceVersion": str(rv),
                         "ownerReferences": [{"uid": "w-uid", "controller": True}]},
            "spec": {"template": {}},
            "status": {"active": 1, **({"conditions": conditions} if conditions else {})}}


def passes(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return ChildNews().update(UpdateEvent(old, new))


def test_another_components_annotation_wakes_nobody() -> None:
    """The test environment's admitter marks each pod it admits (as any other
    component may annotate a pod): the owner reads nothing of it."""
    new = pod(11)
    new["metadata"]["annotations"]["testenv.gpu-orchestrator.dev/admitted"] = "true"
    assert not passes(pod(10), new)


def test_a_kubelet_status_that_leaves_the_pod_pending_wakes_nobody() -> None:
    new = pod(11, phase="Pending", hostIP="10.0.0.1",
              conditions=[{"type": "PodScheduled", "status": "True"}],
              containerStatuses=[{"name": "c", "state": {"waiting": {}}}])
    assert not passes(pod(10), new)


def test_what_the_owner_reads_wakes_it() -> None:
    old = pod(10)
    assert passes(old, pod(11, phase="Running"))
    assert passes(old, pod(11, phase="Succeeded"))
    rejected = pod(11, phase="Failed", reason="OutOfnvidia.com/gpu",
                   message="Pod was rejected: no room")
    assert passes(old, rejected)
    other = copy.deepcopy(rejected)
    other["status"]["message"] = "Pod was rejected: other"
    assert passes(rejected, other), "a failed pod's message is read (kubelet_rejection)"
    for path, value in ((("metadata", "deletionTimestamp"), "2026-11-28T00:00:00Z"),
                        (("metadata", "ownerReferences"), []),
                        (("metadata", "labels"), {"gpu.orchestrator.dev/attempt": "1"}),
                        (("spec", "activeDeadlineSeconds"), 5)):
        new = pod(11)
        new[path[0]][path[1]] = value
        assert passes(old, new), path
    ours = pod(11)
    ours["metadata"]["annotations"]["gpu.orchestrator.dev/devices"] = "1"
    assert passes(old, ours)


def test_a_job_wakes_its_owner_when_it_ends_not_for_its_counts() -> None:
    assert not passes(job(10), {**job(11), "status": {"active": 0, "ready": 1}})
    assert passes(job(10), job(11, [{"type": "Complete", "status": "True"}]))
    assert passes(job(10), job(11, [{"type": "Failed", "status": "True"}]))


def test_adds_and_deletes_pass() -> None:
    news = ChildNews()
    assert news.create(CreateEvent(pod()))
    assert news.delete(DeleteEvent(pod()))


def test_owner_reads_equal_for_a_manifest_and_its_created_copy() -> None:
    """The API's defaults and its own fields (uid, resourceVersion, creation time,
    a Pending status) are nothing the owner reads."""
    sent = pod()
    del sent["status"]
    for k in ("uid", "resourceVersion"):
        del sent["metadata"][k]
    created = pod(12)
    created["metadata"]["creationTimestamp"] = "2026-11-28T00:00:00Z"
    created["spec"]["restartPolicy"] = "Always"
    assert owner_reads(sent) == owner_reads(created)
