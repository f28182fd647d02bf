from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from api.v1alpha1.types import (
    DeviceExposure,
    GPUNode,
    GPUWorkload,
    GPUWorkloadSpec,
    GPUWorkloadStatus,
    Phase,
    Placement,
    Topology,
    WorkloadKind,
)

SEED = {
    "apiVersion": "gpu.orchestrator.dev/v1alpha1",
    "kind": "GPUWorkload",
    "metadata": {
        "name": "seed",
        "namespace": "default",
        "annotations": {"gpu-scheduling-map": "0=node1:0,1\n1=node2:2"},
    },
    "spec": {
        "replicas": 2,
        "gpuCount": 2,
        "schedulingStrategy": "annotationMap",
        "priority": "high",
        "modelName": "llama",
        "retryPolicy": {"maxRetries": 3, "backoffSeconds": 5},
    },
}


def test_defaults_applied_to_empty_spec() -> None:
    w = GPUWorkload.model_validate({"metadata": {"name": "a", "namespace": "ns"}})
    s = w.spec
    assert s.replicas == 1
    assert s.gpus == 1
    assert s.scheduling_strategy is None  # the manager's --default-strategy applies
    assert s.topology is Topology.NONE
    assert s.workload_kind is WorkloadKind.POD
    assert s.device_exposure is None
    assert s.retry_policy.max_retries == 5
    assert s.retry_policy.backoff_seconds == 10
    assert s.retry_policy.max_backoff_seconds == 300
    assert s.priority == 0
    assert w.status.phase is Phase.PENDING
    assert w.key == "ns/a"


def test_seed_spellings_accepted() -> None:
    w = GPUWorkload.model_validate(SEED)
    assert w.spec.gpus == 2
    assert w.spec.priority == 100
    assert w.spec.model_name == "llama"
    assert w.spec.retry_policy.max_retries == 3
    assert w.spec.retry_policy.backoff_seconds == 5
    assert w.scheduling_map_text() == "0=node1:0,1\n1=node2:2"


def test_spec_map_wins_over_annotation() -> None:
    raw = {**SEED, "spec": {**SEED["spec"], "schedulingMap": "0=node9:0"}}
    assert GPUWorkload.model_validate(raw).scheduling_map_text() == "0=node9:0"


@pytest.mark.parametrize(
    ("value", "expected"), [("low", 0), ("medium", 50), ("HIGH", 100), (7, 7), ("42", 42)]
)
def test_priority_names(value: object, expected: int) -> None:
    assert GPUWorkloadSpec.model_validate({"priority": value}).priority == expected


@pytest.mark.parametrize(
    "spec",
    [
        {"replicas": 0},
        {"priority": "urgent"},
        {"priority": -1},
        {"schedulingStrategy": "fastest"},
        {"gpuCount": 2, "gpusPerReplica": 3},
        {"topology": "Sometimes"},
        {"workloadKind": "Deployment"},
        {"deviceExposure": "magic"},
        {"retryPolicy": {"backoffSeconds": 0}},
    ],
)
def test_invalid_specs_rejected(spec: dict) -> None:
    with pytest.raises(ValidationError):
        GPUWorkloadSpec.model_validate(spec)


def test_gpus_per_replica_preferred() -> None:
    assert GPUWorkloadSpec.model_validate({"gpusPerReplica": 3}).gpus == 3
    assert GPUWorkloadSpec.model_validate({"gpusPerReplica": 3, "gpuCount": 3}).gpus == 3


def test_round_trip_wire_form() -> None:
    w = GPUWorkload.model_validate(SEED)
    w.status.placements = [Placement(index=0, node="node1", devices=[0, 1])]
    w.status.next_retry_time = datetime(2024, 1, 2, 3, 4, 5, 123, tzinfo=UTC)
    out = w.to_api()
    assert out["spec"]["schedulingStrategy"] == "annotationMap"
    assert out["status"]["placements"] == [{"index": 0, "node": "node1", "devices": [0, 1]}]
    assert out["status"]["nextRetryTime"] == "2024-01-02T03:04:05Z"
    assert GPUWorkload.model_validate(out).spec == w.spec


def test_gpunode_parses_agent_report() -> None:
    n = GPUNode.model_validate(
        {
            "metadata": {"name": "node1"},
            "status": {
                "devices": [
                    {
                        "index": 0,
                        "uuid": "GPU-a",
                        "memoryTotalMiB": 81920,
                        "nvlinkPeers": [1],
                        "healthy": True,
                        "utilization": 10,
                        "powerWatts": 80.5,
                    },
                    {"index": 1, "uuid": "GPU-b", "healthy": False, "nvlinkPeers": None},
                ],
                "lastHeartbeatTime": "2024-01-01T00:00:00Z",
            },
        }
    )
    assert n.node_name == "node1"
    assert n.status.devices[0].memory_total_mib == 81920
    assert n.status.devices[1].healthy is False
    assert n.status.devices[1].nvlink_peers == []
    assert n.to_api()["status"]["lastHeartbeatTime"] == "2024-01-01T00:00:00Z"


def test_a_queue_status_reads_and_writes_as_a_workloads_does() -> None:
    """The shared field types: a null list reads as empty, a time is written as
    Kubernetes writes times (seconds, ``Z``), as the queue-status controller does."""
    from api.v1alpha1.queues import GPUQueueStatus

    st = GPUQueueStatus.model_validate({"conditions": None,
                                        "lastUpdateTime": "2024-01-02T03:04:05Z"})
    assert st.conditions == []
    st.last_update_time = datetime(2024, 1, 2, 3, 4, 5, 123, tzinfo=UTC)
    assert st.to_api()["lastUpdateTime"] == "2024-01-02T03:04:05Z"
    assert GPUWorkloadStatus.model_validate({"conditions": None}).conditions == []


def test_exposure_enum_values() -> None:
    assert {e.value for e in DeviceExposure} == {
        "cuda-visible-devices",
        "nvidia-visible-devices",
        "device-plugin",
        "dra",
    }


def test_set_condition_transition_time_only_on_status_change() -> None:
    """The one condition setter (``controllers.status.conditions.set_condition``, on the raw
    status the reconciler writes): lastTransitionTime moves only when the status
    flips; the model reads what it wrote."""
    from api.v1alpha1.types import GPUWorkloadStatus
    from controllers.status.conditions import set_condition

    t0, t1 = "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z"
    c = set_condition([], "Unschedulable", True, "NoFit", "node1: NotReady", t0, 1)
    c = set_condition(c, "Unschedulable", True, "NoFit", "node1: NotReady", t1, 1)
    assert c[0]["lastTransitionTime"] == t0
    c = set_condition(c, "Unschedulable", True, "NoFit", "node2: NotReady", t1, 2)
    assert c[0]["lastTransitionTime"] == t0 and c[0]["message"] == "node2: NotReady"
    assert c[0]["observedGeneration"] == 2
    c = set_condition(c, "Unschedulable", False, "Placed", "", t1, 2)
    assert c[0]["lastTransitionTime"] == t1 and len(c) == 1
    st = GPUWorkloadStatus.model_validate({"conditions": c})
    wire = st.to_api()["conditions"][0]
    assert wire["lastTransitionTime"] == "2024-01-02T00:00:00Z" and wire["status"] == "False"
    assert st.remove_condition("Unschedulable") and st.conditions == []


def test_a_template_its_children_could_not_be_stored_with_is_invalid() -> None:
    """Issue 23: a 1.4 MB template was accepted, then every child create failed."""
    import pydantic

    from api.v1alpha1.types import MAX_TEMPLATE_BYTES, GPUWorkloadSpec

    big = {"spec": {"containers": [{"name": "c", "image": "x",
                                    "command": ["x" * MAX_TEMPLATE_BYTES]}]}}
    with pytest.raises(pydantic.ValidationError, match=r"the template is \d+ bytes as JSON; "
                                                        r"a child is made from it only up "
                                                        r"to 1048576"):
        GPUWorkloadSpec.model_validate({"template": big})
    GPUWorkloadSpec.model_validate({"template": {"spec": {"containers": [
        {"name": "c", "image": "x", "command": ["x" * 1000]}]}}})
