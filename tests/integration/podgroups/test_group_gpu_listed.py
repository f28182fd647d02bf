"""A pod group asking nvidia.com/gpu on named nodes, one of which lists
``nvidia.com/gpu: 0`` (a device plugin ran there before; the kubelet keeps its
resource at 0): the kubelet would refuse a member there (OutOfnvidia.com/gpu), so
the pod binding places the group on the other node, and a group that fits nowhere
else waits, its Event naming that node and why (docs/podgroups.md, "A GPU request on
a named node without the device plugin"). Before, node fit left nvidia.com/gpu to
the GPU filters, which read the GPUNode's 4 devices: a member was bound there and
then Failed by the kubelet (the test environment's admitter). The node's agent
reports its GPUs after the plugin is gone: the gpunode-capacity policy takes a
capacity of 0 as no bound (before, it refused that GPUNode write, and the agent's
report went stale)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from runtime import Client
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    cleanup_gpunodes,
    group,
    installed,
)
from tests.integration.podgroups.controllers import gpu_pod
from tests.integration.podgroups.fixtures import (
    bound,
    members,
    named_nodes,
    peer_fixtures,
    pinned,
    told,
)
from tests.waiting import eventually

GROUP = "gpu.orchestrator.dev/pod-group"
GPU = "nvidia.com/gpu"
LISTED_0 = (f"node lists {GPU}: 0 (a device plugin ran there); the kubelet would refuse "
            f"the pod (OutOf{GPU})")

peers, binder = peer_fixtures()  # no peer controller: the pods are labelled as a group


@contextlib.contextmanager
def gpunodes(admin: Client, nodes: list[str]) -> Iterator[None]:  # noqa: F811
    """Each node's GPUNode as its agent writes it: 4 healthy devices."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with cleanup_gpunodes(admin, *nodes):
        for node in nodes:
            admin.create({"apiVersion": API_VERSION, "kind": "GPUNode",
                          "metadata": {"name": node}, "spec": {"nodeName": node}})
            admin.patch(API_VERSION, "GPUNode", node, {"status": {
                "devices": [{"index": i, "uuid": f"GPU-{node}-{i}",
                             "model": "NVIDIA H100 80GB HBM3", "memoryTotalMiB": 81559,
                             "healthy": True} for i in range(4)],
                "deviceCount": 4, "healthyCount": 4, "lastHeartbeatTime": now}},
                subresource="status")
        yield


def list_zero_gpus(cluster: ControlPlane, node: str) -> None:
    """The node's status as a kubelet leaves it once its device plugin is gone."""
    code, body = cluster.api("PATCH", f"/api/v1/nodes/{node}/status",
                             {"status": {"capacity": {GPU: "0"}, "allocatable": {GPU: "0"}}},
                             content_type="application/merge-patch+json")
    assert code == 200, body


def member(name: str, i: int, size: int, gpus: int, group: NodeGroup) -> dict[str, Any]:  # noqa: F811
    pod = pinned(gpu_pod(gpus), group)
    pod["metadata"] = {"name": f"{name}-{i}", "labels": {GROUP: name},
                       "annotations": {"gpu.orchestrator.dev/pod-group-size": str(size)}}
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def test_a_member_is_not_bound_where_the_node_lists_zero_gpus(
        binder: Running, admin: Client, namespace: str, group: NodeGroup) -> None:  # noqa: F811
    zero, other = binder.wait_nodes(named_nodes(group, 2, gpus=4))
    # the device plugin ran on ``zero`` and is gone; then its agent reports its 4
    # GPUs (a capacity of 0 bounds no GPUNode write: the gpunode-capacity policy)
    list_zero_gpus(binder.cluster, zero)
    with gpunodes(admin, [zero, other]):
        for node in (zero, other):
            binder.sees(node, lambda i: len(i.devices) == 4, "its GPUNode's 4 devices")
        binder.sees(zero, lambda i: not i.allocatable.get(GPU), f"{GPU}: 0 listed")

        # 2 members x 2 GPUs: both on the other node, none where the kubelet refuses
        for i in range(2):
            admin.create(member("pair", i, 2, 2, group), namespace=namespace)
        pair = eventually(lambda: ps if len(bound(ps := members(
            admin, namespace, "pair", GROUP))) == 2 else None,
            timeout=60, what="the pair's 2 members bound")
        assert [p["spec"]["nodeName"] for p in pair] == [other, other]

        # the other node is full: a second group waits, told why the first node
        # does not take it
        for i in range(2):
            admin.create(member("late", i, 2, 1, group), namespace=namespace)
        message = eventually(lambda: told(admin, namespace, ["late-0", "late-1"],
                                          "FailedScheduling", LISTED_0),
                             timeout=60, what="the late group told why not on the node")
        assert f"{zero}: {LISTED_0}" in message
        assert not bound(members(admin, namespace, "late", GROUP))
        assert not any(r["reason"] == f"OutOf{GPU}"
                       for r in binder.cluster.admission_rejections(namespace))
