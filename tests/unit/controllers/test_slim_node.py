"""The manager's Node cache keeps what the placement state reads and nothing else
(``controllers.informers.slim_node``): a kubelet's node lists its images, addresses,
versions and every condition's times and messages, 5-15 KiB a node in the cache that
nothing here reads. The scheduler sees the same node from the slim object as from
the full one, and the cache holds under half the bytes per node."""

from __future__ import annotations

import copy
import tracemalloc
from typing import Any

import orjson
import pytest

from controllers.informers import slim_node
from internal.scheduling import Snapshot
from runtime.informer import SharedInformerFactory
from runtime.store import freeze


def kubelet_node(name: str, *, ready: str = "True", taints: list[dict[str, Any]] | None = None,
                 unschedulable: bool = False) -> dict[str, Any]:
    """A Node as a kubelet reports it (what ``kubectl get node -o json`` shows)."""
    when = "2026-11-28T16:04:10Z"
    conditions = [{"type": t, "status": "False", "reason": f"KubeletHasNo{t}",
                   "message": f"kubelet has no {t}", "lastHeartbeatTime": when,
                   "lastTransitionTime": when}
                  for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]
    conditions.append({"type": "Ready", "status": ready, "reason": "KubeletReady",
                       "message": "kubelet is posting ready status", "lastHeartbeatTime": when,
                       "lastTransitionTime": when})
    capacity = {"cpu": "96", "memory": "1056Gi", "pods": "110", "ephemeral-storage": "3Ti",
                "nvidia.com/gpu": "8", "hugepages-1Gi": "0"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "4711",
                     "creationTimestamp": when,
                     "labels": {"kubernetes.io/hostname": name, "zone": "a",
                                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"podCIDR": "10.0.0.0/24", "providerID": f"aws:///{name}",
                 "taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "capacity": capacity, "allocatable": {**capacity, "memory": "1050Gi"},
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "10.1.2.3"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"architecture": "amd64", "bootID": "5c1f-" + name,
                         "containerRuntimeVersion": "containerd://1.7.22",
                         "kernelVersion": "6.8.0-1015-aws", "kubeletVersion": "v1.34.4",
                         "machineID": "ec2" + name, "operatingSystem": "linux",
                         "osImage": "Ubuntu 24.04.1 LTS", "systemUUID": "ec2-" + name},
            "images": [{"names": [f"registry.example.com/team/train@sha256:{i:064x}",
                                  f"registry.example.com/team/train:v{i}"],
                        "sizeBytes": 9_000_000_000 + i} for i in range(20)],
        },
    }


VARIANTS = [kubelet_node("n1"), kubelet_node("n1", ready="False"),
            kubelet_node("n1", unschedulable=True),
            kubelet_node("n1", taints=[{"key": "gpu", "value": "h100", "effect": "NoSchedule"}])]


@pytest.mark.parametrize("full", VARIANTS, ids=["ready", "not-ready", "cordoned", "tainted"])
def test_the_scheduler_sees_the_same_node_from_the_slim_object(full: dict[str, Any]) -> None:
    slim = slim_node(copy.deepcopy(full))
    assert Snapshot.build([freeze(slim)]).get("n1") == Snapshot.build([freeze(full)]).get("n1")
    assert slim["metadata"] == full["metadata"] and slim["spec"] == full["spec"]
    assert slim["status"]["allocatable"] == full["status"]["allocatable"]
    assert [c["type"] for c in slim["status"]["conditions"]] == \
        ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    assert set(slim["status"]) == {"capacity", "allocatable", "conditions"}


def test_the_node_cache_holds_under_half_the_bytes_per_node() -> None:
    wire = [orjson.dumps(kubelet_node(f"node{i:04d}")) for i in range(200)]

    def kept(transform: Any) -> float:
        tracemalloc.start()
        try:
            store = [freeze(transform(orjson.loads(b))) for b in wire]
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(store) == len(wire)
        return size / len(wire)

    full, slim = kept(lambda o: o), kept(slim_node)
    assert slim < 0.5 * full, (slim, full)


def test_the_managers_node_informer_slims_what_it_stores() -> None:
    factory = SharedInformerFactory(client=None)  # type: ignore[arg-type]
    nodes = factory.informer_for("v1", "Node", transform=slim_node)
    node = kubelet_node("n1")
    node["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update"}]
    nodes.replace([node], "1")
    stored = nodes.indexer.get_by_name("n1")
    assert stored is not None and "images" not in stored["status"]
    assert "managedFields" not in stored["metadata"]  # the factory's own transform too
    assert factory.informer_for("v1", "Node") is nodes
    with pytest.raises(ValueError, match="shared"):
        factory.informer_for("v1", "Node", transform=lambda o: o)
