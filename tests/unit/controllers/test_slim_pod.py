"""The manager's Pod cache drops what nobody here reads of a pod's status
(``controllers.informers.slim_pod``): a kubelet's container states, the pod's
addresses, its start time and QoS class, each condition's lastProbeTime. What the
manager's readers read of a pod comes out of the slim pod as out of the full one."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from controllers.informers import POD_STATUS_UNREAD, make_informers, slim_pod
from controllers.podbinding.leaderfirst import ready_since
from controllers.shared.child_news import owner_reads
from runtime.informer import SharedInformerFactory

WHEN = "2026-11-28T19:43:17Z"


def kubelet_pod(phase: str = "Running") -> dict[str, Any]:
    """A pod as a kubelet reports it (``kubectl get pod -o json``)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "w-0", "namespace": "team", "uid": "u1", "resourceVersion": "7",
                     "labels": {"gpu.orchestrator.dev/attempt": "0"},
                     "annotations": {"gpu.orchestrator.dev/devices": "0"},
                     "ownerReferences": [{"apiVersion": "gpu.orchestrator.dev/v1alpha1",
                                          "kind": "GPUWorkload", "name": "w", "uid": "wu",
                                          "controller": True}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox:1.36"}]},
        "status": {
            "phase": phase, "reason": "OutOfgpu", "message": "kubelet refused it",
            "nominatedNodeName": "n2",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": WHEN, "reason": "R", "message": "m"}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "w-0-gpu"}],
            "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}], "podIP": "10.1.0.7",
            "podIPs": [{"ip": "10.1.0.7"}], "startTime": WHEN, "qosClass": "BestEffort",
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                   "image": "busybox:1.36", "imageID": "", "started": True,
                                   "state": {"running": {"startedAt": WHEN}},
                                   "lastState": {}}],
            "initContainerStatuses": [], "ephemeralContainerStatuses": [],
        },
    }


def test_the_slim_pod_keeps_what_the_manager_reads() -> None:
    full = kubelet_pod()
    slim = slim_pod(copy.deepcopy(full))
    assert slim["metadata"] == full["metadata"] and slim["spec"] == full["spec"]
    kept = {"phase", "reason", "message", "nominatedNodeName", "conditions",
            "resourceClaimStatuses"}
    assert set(slim["status"]) == kept
    assert not set(POD_STATUS_UNREAD) & set(slim["status"])
    assert [set(c) for c in slim["status"]["conditions"]] == \
        [{"type", "status", "lastTransitionTime", "reason", "message"}] * 4
    assert ready_since(slim) == ready_since(full) is not None
    for phase in ("Pending", "Running", "Failed"):
        assert owner_reads(slim_pod(kubelet_pod(phase))) == owner_reads(kubelet_pod(phase))


def test_the_managers_pod_informer_slims_what_it_stores() -> None:
    factory = SharedInformerFactory(client=None)  # type: ignore[arg-type]
    informers = make_informers(SimpleNamespace(informer_for=factory.informer_for),  # type: ignore[arg-type]
                               dra=False)
    informers.pods.replace([kubelet_pod()], "1")
    stored = informers.pods.indexer.get_by_key("team/w-0")
    assert stored is not None and stored["status"]["phase"] == "Running"
    assert "containerStatuses" not in stored["status"] and "podIPs" not in stored["status"]
    assert factory.informer_for("v1", "Pod") is informers.pods  # a late reader shares it
