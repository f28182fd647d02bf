"""A pod group's member in nvidia-visible-devices mode reads NVIDIA_VISIBLE_DEVICES
from the device UUIDs annotation: the pod binding writes it in the same Binding as
the devices annotation, from the node's GPUNode (controllers/podbinding/controller.py),
and only for a pod that reads it."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import DEVICE_UUIDS_FIELD_PATH
from controllers.placement.state import PlacementState
from tests.unit.controllers.podbinding.fixtures import GroupEnv, member
from tests.unit.scheduling.helpers import gpunode

UUIDS = "gpu.orchestrator.dev/device-uuids"
REF = {"name": "NVIDIA_VISIBLE_DEVICES",
       "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": DEVICE_UUIDS_FIELD_PATH}}}


class UuidEnv(GroupEnv):
    """GroupEnv whose node1..node3 have a GPUNode (devices ``GPU-node<n>-<i>``);
    node4 has none, so its UUIDs are unknown."""

    def fill(self, state: PlacementState, workloads: list[dict[str, Any]] = ()  # type: ignore[assignment]
             ) -> list[str]:
        gpunodes = [gpunode(f"node{n}") for n in (1, 2, 3)]
        for g in gpunodes:  # a heartbeat in the future is fresh
            g["status"]["lastHeartbeatTime"] = "2999-01-01T00:00:00Z"
        return state.rebuild(lambda: (self.nodes, gpunodes, list(workloads), self.pods.list()))


def annotations(env: GroupEnv) -> dict[str, dict[str, str]]:
    return {b["metadata"]["name"]: (b["metadata"].get("annotations") or {})
            for b in env.client.bindings}


def placed(env: GroupEnv, group: str, size: int, gpus: int, env_of: list[dict]) -> None:
    for i in range(size):
        p = member(group, i, size=size, gpus=gpus)
        p["spec"]["containers"][0]["env"] = [dict(e) for e in env_of]
        env.add(p)
    for i in range(size):
        env.reconcile(f"{group}-{i}")
    for name in list(env.enqueued):
        env.reconcile(name)


def test_a_member_reading_the_uuids_is_bound_with_its_devices_uuids_in_order() -> None:
    """Each Binding carries the UUIDs of the very devices it names, in their order;
    on the node whose GPUNode is missing, the host indices (as a child's
    NVIDIA_VISIBLE_DEVICES is then). Before, no Binding carried them: the
    reference read nothing and the container saw no GPU."""
    env = UuidEnv()
    placed(env, "ring", 8, 2, [REF])
    got = annotations(env)
    assert len(got) == 8
    nodes = {b["metadata"]["name"]: b["target"]["name"] for b in env.client.bindings}
    for name, ann in got.items():
        devices = ann["gpu.orchestrator.dev/devices"].split(",")
        node = nodes[name]
        want = devices if node == "node4" else [f"GPU-{node}-{d}" for d in devices]
        assert ann[UUIDS] == ",".join(want), (name, node, ann)
    assert {nodes[n] for n in got} == {"node1", "node2", "node3", "node4"}


def test_a_member_reading_only_its_devices_gets_no_uuids() -> None:
    """The annotation is written for the pods that read it: a member in
    cuda-visible-devices mode (and a seed pod re-created from its own YAML, which
    the pod-devices policy would refuse with it) carries none."""
    env = UuidEnv()
    cuda = {"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "metadata.annotations['gpu.orchestrator.dev/devices']"}}}
    placed(env, "ring", 4, 4, [cuda])
    got = annotations(env)
    assert len(got) == 4
    assert all(UUIDS not in ann and "gpu.orchestrator.dev/devices" in ann
               for ann in got.values()), got
