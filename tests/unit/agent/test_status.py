"""The GPUNode status and node labels the agent writes, and which changes are written
at once."""

from __future__ import annotations

from datetime import UTC, datetime

from api.v1alpha1.types import GPUNodeStatus
from internal.agent.nvml import FixtureBackend, sample
from internal.agent.status import (
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_MODEL,
    LABEL_NVLINK,
    build_status,
    fingerprint,
    label_value,
    new_gpunode,
    node_labels,
)

T = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def test_status_matches_the_api_model_and_reports_health_and_peers() -> None:
    st = build_status(sample(FixtureBackend.load("a100-ecc-4")), T)
    assert GPUNodeStatus.model_validate(st).to_api() == st
    assert st["lastHeartbeatTime"] == "2025-03-01T12:00:00Z"
    assert (st["deviceCount"], st["healthyCount"], st["topologyKnown"]) == (4, 3, True)
    d2 = st["devices"][2]
    assert d2 == {
        "index": 2, "uuid": "GPU-7c8d9e0f-1a2b-4c3d-ae4f-5a6b7c8d9e03",
        "model": "NVIDIA A100-SXM4-80GB", "memoryTotalMiB": 81920, "memoryUsedMiB": 4,
        "utilization": 0, "temperature": 35, "powerWatts": 63.002, "eccErrors": 2,
        "healthy": False, "migMode": False, "nvlinkPeers": [0, 1, 3],
    }
    assert st["driverVersion"] == "535.183.01" and st["cudaVersion"] == "12.2"


def test_labels() -> None:
    assert node_labels(sample(FixtureBackend.load("h100-sxm-8"))) == {
        LABEL_GPU_COUNT: "8", LABEL_GPU_MODEL: "NVIDIA-H100-80GB-HBM3",
        LABEL_GPU_MEMORY: "81559", LABEL_NVLINK: "true",
    }
    assert node_labels(sample(FixtureBackend.load("pcie-4")))[LABEL_NVLINK] == "false"
    empty = node_labels(sample(FixtureBackend({"devices": []})))
    assert empty == {LABEL_GPU_COUNT: "0", LABEL_GPU_MODEL: None, LABEL_GPU_MEMORY: None,
                     LABEL_NVLINK: None}
    assert label_value(" Tesla V100-SXM2-16GB (rev a1) ") == "Tesla-V100-SXM2-16GB-rev-a1"
    assert len(label_value("x" * 100)) == 63


def test_fingerprint_ignores_load_but_not_health_or_devices() -> None:
    be = FixtureBackend.load("h100-sxm-8")
    base = fingerprint(sample(be))
    be.update_device(0, {"utilization": {"gpu": 99}, "temperature": 80, "powerUsage": 700000,
                         "memory": {"used": 1 << 34}})
    assert fingerprint(sample(be)) == base
    be.mark_unhealthy(0)
    assert fingerprint(sample(be)) != base
    be.mark_healthy(0)
    assert fingerprint(sample(be)) == base
    be.update_device(1, {"migMode": {"current": 1}})
    assert fingerprint(sample(be)) != base
    be.update_device(1, {"migMode": {"current": 0}})
    be.remove_device(7)
    assert fingerprint(sample(be)) != base


def test_new_gpunode_is_owned_by_its_node() -> None:
    g = new_gpunode("n1", "uid-1")
    assert g["metadata"]["name"] == "n1" and g["spec"] == {"nodeName": "n1"}
    assert g["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-1"}
    assert "ownerReferences" not in new_gpunode("n1")["metadata"]
