"""A pod group in nvidia-visible-devices mode on the real control plane: our webhook
gives each member NVIDIA_VISIBLE_DEVICES as a reference to the device UUIDs
annotation, the manager's pod binding places the group and writes, in each
member's Binding, the UUIDs its node's GPUNode gives its devices, and the
pod-devices policy refuses a tenant who would write those UUIDs or a literal
NVIDIA_VISIBLE_DEVICES (docs/podgroups.md, "Exact devices for a member")."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from api.v1alpha1.keys import (
    DEVICE_UUIDS_ANNOTATION,
    DEVICE_UUIDS_FIELD_PATH,
    DEVICES_ANNOTATION,
    REQUESTED_EXPOSURE_ANNOTATION,
)
from api.v1alpha1.types import API_VERSION
from runtime import Client, errors
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    admin,
    cleanup_gpunodes,
    group,
    installed,
    tenant,
)
from tests.integration.podgroups.controllers import gpu_pod
from tests.integration.podgroups.fixtures import bound, members, named_nodes, peer_fixtures, pinned
from tests.waiting import eventually

UUIDS = {"name": "NVIDIA_VISIBLE_DEVICES",
         "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": DEVICE_UUIDS_FIELD_PATH}}}
GROUP = "gpu.orchestrator.dev/pod-group"
ONLY_OURS = "only the gpu-orchestrator controller and webhook give pods GPU devices"

peers, binder = peer_fixtures()  # no peer controller: the pods are labelled as a group


@contextlib.contextmanager
def gpunodes(admin: Client, nodes: list[str]) -> Iterator[dict[str, list[str]]]:  # noqa: F811
    """Each node's GPUNode as its agent writes it, its 4 devices' UUIDs of this test
    alone; yields node -> UUIDs by device index."""
    made = {n: [f"GPU-{uuid.uuid4()}" for _ in range(4)] for n in nodes}
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with cleanup_gpunodes(admin, *nodes):
        for node, uuids in made.items():
            admin.create({"apiVersion": API_VERSION, "kind": "GPUNode",
                          "metadata": {"name": node}, "spec": {"nodeName": node}})
            admin.patch(API_VERSION, "GPUNode", node, {"status": {
                "devices": [{"index": i, "uuid": u, "model": "NVIDIA H100 80GB HBM3",
                             "memoryTotalMiB": 81559, "healthy": True}
                            for i, u in enumerate(uuids)],
                "deviceCount": 4, "healthyCount": 4, "lastHeartbeatTime": now}},
                subresource="status")
        yield made


def ring_member(i: int, group: NodeGroup, mode: str, gpus: int,  # noqa: F811
                env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    pod = pinned(gpu_pod(gpus), group)
    if env is not None:
        pod["spec"]["containers"][0]["env"] = env
    pod["metadata"] = {"name": f"ring-{i}", "labels": {GROUP: "ring"}, "annotations": {
        "gpu.orchestrator.dev/pod-group-size": "2", REQUESTED_EXPOSURE_ANNOTATION: mode}}
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def test_a_group_in_nvidia_mode_reads_its_devices_uuids_from_its_binding(
        binder: Running, exposure: None, admin: Client, tenant: Client,  # noqa: F811
        namespace: str, group: NodeGroup) -> None:  # noqa: F811
    """2 members x 3 GPUs on 2 nodes x 4 GPUs whose GPUNodes give their UUIDs: each
    member is bound with the UUIDs of exactly its devices, in their order, and its
    container reads NVIDIA_VISIBLE_DEVICES from them (before, it got
    CUDA_VISIBLE_DEVICES host indices whatever its mode, and no Binding wrote UUIDs)."""
    nodes = binder.wait_nodes(named_nodes(group, 2, gpus=4))
    with gpunodes(admin, nodes) as uuids:
        for node in nodes:
            binder.sees(node, lambda i, n=node: [i.devices[d].uuid for d in range(4)]
                        == uuids[n], "its GPUNode's UUIDs")
        for i in range(2):
            made = tenant.create(ring_member(i, group, "nvidia-visible-devices", 3),
                                 namespace=namespace)
            assert made["spec"]["containers"][0]["env"] == [UUIDS]
        pods = eventually(lambda: ps if len(bound(ps := members(admin, namespace, "ring", GROUP)))
                          == 2 else None, timeout=60, what="the group's 2 members bound")
        for p in pods:
            ann, node = p["metadata"]["annotations"], p["spec"]["nodeName"]
            devices = [int(d) for d in ann[DEVICES_ANNOTATION].split(",")]
            assert len(devices) == 3, ann
            assert ann[DEVICE_UUIDS_ANNOTATION] == ",".join(uuids[node][d] for d in devices)
            assert p["spec"]["containers"][0]["env"] == [UUIDS]
        # the tenant cannot point the reference at other GPUs, now or at creation
        name = pods[0]["metadata"]["name"]
        with pytest.raises(errors.Forbidden, match=f"the {DEVICE_UUIDS_ANNOTATION} annotation"):
            tenant.patch("v1", "Pod", name, {"metadata": {"annotations": {
                DEVICE_UUIDS_ANNOTATION: ",".join(uuids[nodes[0]])}}}, namespace=namespace)
        forged = ring_member(2, group, "nvidia-visible-devices", 3)
        forged["metadata"]["annotations"][DEVICE_UUIDS_ANNOTATION] = uuids[nodes[0]][0]
        with pytest.raises(errors.Forbidden, match=f"the {DEVICE_UUIDS_ANNOTATION} annotation"):
            tenant.create(forged, namespace=namespace)
        literal = ring_member(3, group, "cuda-visible-devices", 3,
                              env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": uuids[nodes[0]][0]}])
        with pytest.raises(errors.Forbidden, match=ONLY_OURS):
            tenant.create(literal, namespace=namespace)
