"""A node whose kubelet rejected one of a workload's pods: the rejection read from
the pod, and the node avoided by that workload's next attempts for a while."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api.v1alpha1.types import GPUWorkload
from internal.scheduling import SCHEDULED, schedule
from internal.scheduling.rejections import AVOID_SECONDS, avoid_reason, kubelet_rejection
from tests.unit.scheduling.helpers import cluster, node, workload


def rejected(gpus: int, *entries: dict) -> GPUWorkload:
    return GPUWorkload.model_validate({
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"gpusPerReplica": gpus}, "status": {"rejections": list(entries)}})


def rejected_at(when: datetime, name: str = "node1") -> dict:
    return {"node": name, "reason": "OutOfcpu",
            "message": "Node didn't have enough resource: cpu",
            "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")}


def test_a_kubelet_rejection_is_read_from_the_pods_status() -> None:
    rejected = {"status": {"phase": "Failed", "reason": "OutOfcpu",
                           "message": "Pod was rejected: Node didn't have enough resource: "
                                      "cpu, requested: 8000, used: 60000, capacity: 64000"}}
    failed = {"status": {"phase": "Failed", "reason": "Error", "message": "exit 1"}}
    assert kubelet_rejection([failed]) is None
    assert kubelet_rejection([failed, rejected]) == (
        "OutOfcpu", "Node didn't have enough resource: cpu, requested: 8000, used: 60000, "
        "capacity: 64000")


def test_the_next_attempt_avoids_the_node_for_a_while() -> None:
    snap, led = cluster(node("node1", 4), node("node2", 2))
    now = datetime.now(UTC)
    fresh = workload("w", gpusPerReplica=1)
    assert schedule(fresh, snap, led).placements[0].node == "node1"  # the emptier one

    recent = rejected_at(now - timedelta(seconds=30))
    d = schedule(rejected(1, recent), snap, led)
    assert d.outcome == SCHEDULED and d.placements[0].node == "node2"

    d = schedule(rejected(3, recent), snap, led)
    assert "node1: its kubelet rejected this workload's pod" in d.message
    assert "(OutOfcpu); avoided for 5m" in d.message

    old = rejected(1, rejected_at(now - timedelta(seconds=AVOID_SECONDS + 1)))
    assert avoid_reason(old.status.rejections, "node1", now) is None
    assert schedule(old, snap, led).placements[0].node == "node1"
