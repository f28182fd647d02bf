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
from tests.integration.podgroups.fixtures import members, nodes_shown, pinned, slots_of
from tests.waiting import eventually

DEVICES = "gpu.orchestrator.dev/devices"
SLOTS = "gpu.orchestrator.dev/group-slots"
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


@contextlib.contextmanager
def sliced_nodes(installed: ControlPlane, binder: Running, group: NodeGroup,  # noqa: F811
                 count: int) -> Iterator[list[str]]:
    """``count`` nodes of 4 GPUs whose GPUs NVIDIA's driver publishes; their names."""
    admin = Client.from_kubeconfig(str(installed.kubeconfig))
    nodes = binder.wait_nodes(group.add(count, gpus=4))
    for node in nodes:
        admin.create(nvidia_slice(node, 4))

    def seen() -> bool:
        state = binder.reconciler.state if binder.reconciler is not None else None
        if state is None or not state.ready:
            return True  # its rebuild reads the slices from the cache
        infos = [state.node_info(node) for node in nodes]
        return all(info is not None and info.dra_driver == DRIVER and len(info.devices) == 4
                   for info in infos)
    eventually(seen, timeout=30, what="the manager sees the nodes' ResourceSlices")
    yield list(nodes)
    for node in nodes:
        with contextlib.suppress(NotFound):
            admin.delete(DRA, "ResourceSlice", f"{node}-{DRIVER}")


@pytest.fixture
def sliced(installed: ControlPlane, binder: Running,  # noqa: F811
           group: NodeGroup) -> Iterator[str]:  # noqa: F811
    """One node of 4 GPUs whose GPUs NVIDIA's driver publishes; its name."""
    with sliced_nodes(installed, binder, group, 1) as (node,):
        yield node


def claim_template(ns: str, name: str = TEMPLATE, count: int = 2) -> dict[str, Any]:
    return {"apiVersion": DRA, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count}}]}}}}


def dra_jobset(name: str, group: NodeGroup,  # noqa: F811
               jobs: list[tuple[str, int, int, str]] | None = None,
               order: str | None = None) -> dict[str, Any]:
    """A JobSet of replicated jobs ``(name, replicas, pods per Job, claim template)``,
    each pod with a claim from its job's template (default: one Job of 2 pods, 2
    GPUs each from ``TEMPLATE``)."""
    jobs = jobs or [("workers", 1, 2, TEMPLATE)]
    js = jobset(name, [j[:3] for j in jobs], order=order)
    for rj, (*_, claim_template_name) in zip(js["spec"]["replicatedJobs"], jobs, strict=True):
        template = rj["template"]["spec"]["template"]
        pinned(template, group)
        template["metadata"] = {"annotations": {"gpu.orchestrator.dev/device-exposure": "dra"}}
        template["spec"]["resourceClaims"] = [{"name": "gpus",
                                               "resourceClaimTemplateName": claim_template_name}]
        template["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return js


def bound_members(admin: Client, ns: str, name: str, timeout: float,
                  count: int = 2) -> list[dict[str, Any]]:
    def all_bound() -> list[dict[str, Any]] | None:
        pods = members(admin, ns, name)
        return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) \
            else None
    return eventually(all_bound, timeout=timeout, what=f"the {count} members of {name} bound")


def claim_of(admin: Client, pod: dict[str, Any]) -> dict[str, Any]:
    fresh = admin.get("v1", "Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])
    (status,) = fresh["status"]["resourceClaimStatuses"]
    return admin.get(DRA, "ResourceClaim", status["resourceClaimName"],
                     pod["metadata"]["namespace"])


def allocated(claim: dict[str, Any]) -> list[tuple[str, str]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return sorted((r["pool"], r["device"])
                  for r in (alloc.get("devices") or {}).get("results") or ())


def check_claims(admin: Client, pods: list[dict[str, Any]], node: str | None) -> list[str]:
    """Each member's claim allocated to exactly its devices annotation's devices on
    its node (``node``, when given), reserved for it, with kube-scheduler's
    finalizer; its devices."""
    held: list[str] = []
    for pod in pods:
        devices = pod["metadata"]["annotations"][DEVICES].split(",")
        claim = claim_of(admin, pod)
        assert node is None or pod["spec"]["nodeName"] == node
        node_of = pod["spec"]["nodeName"]
        assert allocated(claim) == sorted((node_of, f"gpu-{d}") for d in devices), claim
        assert [(r["name"], r["uid"]) for r in claim["status"]["reservedFor"]] == \
            [(pod["metadata"]["name"], pod["metadata"]["uid"])]
        assert DELETE_PROTECTION in claim["metadata"]["finalizers"]
        assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0][
            "matchFields"][0]["values"] == [node_of]
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


def test_an_in_order_dra_jobset_is_placed_whole_at_its_launcher_with_every_claim(
        peers: None, binder: Running, exposure: None, admin: Client, namespace: str,
        installed: ControlPlane, group: NodeGroup) -> None:  # noqa: F811
    """startupPolicy InOrder: a launcher of 1 pod x 1 GPU, then 2 workers x 2 GPUs
    (made by the JobSet controller only once the launcher is ready), all in dra mode,
    on 2 nodes the driver publishes: the launcher is placed with the workers' devices
    held as its slots (their GPUs read from their ResourceClaimTemplate), and each
    worker, once made and its claim made by kube-controller-manager, is bound to its
    slot with its claim allocated to exactly those devices. (Before, the group was
    refused: the workers' claims did not exist when the launcher was placed.)"""
    with sliced_nodes(installed, binder, group, 2):
        admin.create(claim_template(namespace, "one-gpu", 1))
        admin.create(claim_template(namespace, TEMPLATE, 2))
        admin.create(dra_jobset("staged", group, [("launcher", 1, 1, "one-gpu"),
                                                  ("workers", 1, 2, TEMPLATE)],
                                order="InOrder"), namespace=namespace)
        pods = bound_members(admin, namespace, "staged", timeout=150, count=3)
        held = check_claims(admin, pods, None)
        (launcher,) = [p for p in pods if p["metadata"]["labels"][
            "jobset.sigs.k8s.io/replicatedjob-name"] == "launcher"]
        slots = slots_of(launcher["metadata"]["annotations"][SLOTS])
        assert sorted(slots) == [1, 2] and all(len(d.split(",")) == 2
                                               for _, d in slots.values()), slots
        assert len(launcher["metadata"]["annotations"][DEVICES].split(",")) == 1
        for pod in pods:  # each worker on the slot of its index
            if pod is launcher:
                continue
            index = 1 + int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
            assert (pod["spec"]["nodeName"], pod["metadata"]["annotations"][DEVICES]) == \
                slots[index], (pod["metadata"]["name"], slots)
        assert len(held) == 5
        spots = [(p["spec"]["nodeName"], d) for p in pods
                 for d in p["metadata"]["annotations"][DEVICES].split(",")]
        assert len(set(spots)) == 5, spots  # every member's devices its own
        for pod in pods:
            reasons = [e["reason"] for e in events_for(admin, namespace, pod["metadata"]["name"])]
            assert "DeviceConflict" not in reasons and "PodGroupClaimRefused" not in reasons, \
                reasons
        admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", "staged", namespace=namespace,
                     propagation_policy="Foreground")
