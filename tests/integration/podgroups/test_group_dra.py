"""A JobSet whose members ask their GPUs through DRA, as a user of NVIDIA's DRA
driver writes it: a ResourceClaimTemplate of exactly 2 devices of the driver's
DeviceClass, each pod naming it in ``spec.resourceClaims`` and its container in
``resources.claims``. The real JobSet and Job controllers make the pods, our webhook
admits them in ``dra`` mode, kube-controller-manager's resourceclaim controller makes
each pod's claim, and the manager's pod binding places the group whole, allocates
each member's claim to exactly its devices and reserves it for the member before its
Binding (docs/dra.md, "Pod group members"). Once the JobSet is deleted,
kube-controller-manager releases and deletes the claims, and the devices are free."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from controllers.dra.claims import DraOptions
from hack.testenv import ControlPlane
from hack.testenv.dra import DRA, DRIVER, device_class, nvidia_slice
from runtime import Client, NotFound
from tests.integration.controller.conftest import (  # noqa: F401 (fixtures)
    NodeGroup,
    Running,
    events_for,
    group,
    installed,
)
from tests.integration.podgroups.controllers import JOBSET, PeerController, jobset
from tests.integration.podgroups.fixtures import members, nodes_shown, pinned
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"
#: kube-scheduler's finalizer, which kube-controller-manager's resourceclaim
#: controller removes once it deallocated the claim
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
TEMPLATE = "two-gpus"


@pytest.fixture(scope="module")
def peers(installed: ControlPlane) -> Iterator[None]:  # noqa: F811
    run = PeerController(installed, JOBSET).start()
    yield
    run.stop()


@pytest.fixture(scope="module")
def binder(installed: ControlPlane, peers: None) -> Iterator[Running]:  # noqa: F811
    admin = Client.from_kubeconfig(str(installed.kubeconfig))
    with contextlib.suppress(Exception):
        admin.create(device_class())
    run = Running(installed, pod_binding=True, dra=DraOptions()).start()
    yield run
    run.stop()


@pytest.fixture
def sliced(installed: ControlPlane, binder: Running,  # noqa: F811
           group: NodeGroup) -> Iterator[str]:  # noqa: F811
    """One node of 4 GPUs whose GPUs NVIDIA's driver publishes; its name."""
    admin = Client.from_kubeconfig(str(installed.kubeconfig))
    node, = binder.wait_nodes(group.add(1, gpus=4))
    admin.create(nvidia_slice(node, 4))

    def seen() -> bool:
        state = binder.reconciler.state if binder.reconciler is not None else None
        if state is None or not state.ready:
            return True  # its rebuild reads the slice from the cache
        info = state.node_info(node)
        return info is not None and info.dra_driver == DRIVER and len(info.devices) == 4
    eventually(seen, timeout=30, what="the manager sees the node's ResourceSlice")
    yield node
    with contextlib.suppress(NotFound):
        admin.delete(DRA, "ResourceSlice", f"{node}-{DRIVER}")


def claim_template(ns: str) -> dict[str, Any]:
    return {"apiVersion": DRA, "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 2}}]}}}}


def dra_jobset(name: str, group: NodeGroup) -> dict[str, Any]:  # noqa: F811
    """A JobSet of one Job of 2 pods, each with a claim of 2 GPUs from the template."""
    js = jobset(name, [("workers", 1, 2)])
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pinned(template, group)
    template["metadata"] = {"annotations": {"gpu.orchestrator.dev/device-exposure": "dra"}}
    template["spec"]["resourceClaims"] = [{"name": "gpus",
                                           "resourceClaimTemplateName": TEMPLATE}]
    template["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return js


def bound_members(admin: Client, ns: str, name: str, timeout: float) -> list[dict[str, Any]]:
    def all_bound() -> list[dict[str, Any]] | None:
        pods = members(admin, ns, name)
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) \
            else None
    return eventually(all_bound, timeout=timeout, what=f"both members of {name} bound")


def claim_of(admin: Client, pod: dict[str, Any]) -> dict[str, Any]:
    fresh = admin.get("v1", "Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])
    (status,) = fresh["status"]["resourceClaimStatuses"]
    return admin.get(DRA, "ResourceClaim", status["resourceClaimName"],
                     pod["metadata"]["namespace"])


def allocated(claim: dict[str, Any]) -> list[tuple[str, str]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return sorted((r["pool"], r["device"])
                  for r in (alloc.get("devices") or {}).get("results") or ())


def check_claims(admin: Client, pods: list[dict[str, Any]], node: str) -> list[str]:
    """Each member's claim allocated to exactly its devices annotation's devices on
    its node, reserved for it, with kube-scheduler's finalizer; its devices."""
    held: list[str] = []
    for pod in pods:
        devices = pod["metadata"]["annotations"][DEVICES].split(",")
        claim = claim_of(admin, pod)
        assert pod["spec"]["nodeName"] == node
        assert allocated(claim) == sorted((node, f"gpu-{d}") for d in devices), claim
        assert [(r["name"], r["uid"]) for r in claim["status"]["reservedFor"]] == \
            [(pod["metadata"]["name"], pod["metadata"]["uid"])]
        assert DELETE_PROTECTION in claim["metadata"]["finalizers"]
        assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0][
            "matchFields"][0]["values"] == [node]
        # the driver shows the devices: no host-index variable was given it
        assert not any(e["name"] in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
                       for e in pod["spec"]["containers"][0].get("env") or ())
        held += devices
    return held


def test_a_dra_jobset_gets_its_claims_allocated_to_its_devices_and_frees_them(
        peers: None, binder: Running, exposure: None, admin: Client, namespace: str,
        group: NodeGroup, sliced: str, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    node = sliced
    admin.create(claim_template(namespace))
    admin.create(dra_jobset("first", group), namespace=namespace)
    pods = bound_members(admin, namespace, "first", timeout=90)
    held = check_claims(admin, pods, node)
    assert sorted(held, key=int) == ["0", "1", "2", "3"]  # 2 x 2 on the node's 4
    for pod in pods:
        reasons = [e["reason"] for e in events_for(admin, namespace, pod["metadata"]["name"])]
        assert "DeviceConflict" not in reasons, reasons
    # kubectl gpu nodes shows the node's 4 GPUs held by the members, not by claims
    (shown,) = nodes_shown(binder.cluster.kubeconfig, capsys, [node])
    holders = [str(d.get("holder")) for d in shown["devices"]]
    assert shown["free"] == 0 and all(h and "/claim/" not in h for h in holders), shown
    # a second JobSet of the same shape waits: the node's 4 GPUs are held
    admin.create(dra_jobset("second", group), namespace=namespace)
    eventually(lambda: len(members(admin, namespace, "second")) == 2, timeout=60,
               what="the second JobSet's members made")
    assert not [p for p in members(admin, namespace, "second") if p["spec"].get("nodeName")]
    # the first goes: kube-controller-manager releases and deletes its claims, and
    # the second takes the devices
    first_claims = [claim_of(admin, p)["metadata"]["name"] for p in pods]
    admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", "first", namespace=namespace,
                 propagation_policy="Foreground")

    def claims_gone() -> bool:
        names = {c["metadata"]["name"]
                 for c in admin.list(DRA, "ResourceClaim", namespace=namespace)["items"]}
        return not names & set(first_claims)
    eventually(claims_gone, timeout=90, what="the first JobSet's claims deleted")
    second = bound_members(admin, namespace, "second", timeout=90)
    assert sorted(check_claims(admin, second, node), key=int) == ["0", "1", "2", "3"]
    for pod in second:
        reasons = [e["reason"] for e in events_for(admin, namespace, pod["metadata"]["name"])]
        assert "DeviceConflict" not in reasons, reasons
    admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", "second", namespace=namespace,
                 propagation_policy="Foreground")
