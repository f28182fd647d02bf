"""A pod group's member gets CUDA_VISIBLE_DEVICES as a reference to its devices
annotation, or in nvidia-visible-devices mode NVIDIA_VISIBLE_DEVICES as one to its
device UUIDs annotation (internal/webhook/groupexposure.py), through the
AdmissionReview handler."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from api.v1alpha1.keys import DEVICE_UUIDS_FIELD_PATH, DEVICES_FIELD_PATH
from api.v1alpha1.types import DeviceExposure
from internal.webhook.admission import mutate_review
from internal.webhook.groupexposure import group_patch, reads_uuids
from tests.unit.webhook.test_patch import apply_patch, review

REF = {"name": "CUDA_VISIBLE_DEVICES",
       "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": DEVICES_FIELD_PATH}}}
UUIDS = {"name": "NVIDIA_VISIBLE_DEVICES",
         "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": DEVICE_UUIDS_FIELD_PATH}}}
MODE = "gpu.orchestrator.dev/device-exposure"
EXPLICIT = ({"gpu.orchestrator.dev/pod-group": "g"}, {"gpu.orchestrator.dev/pod-group-size": "2"})
JOBSET = ({"jobset.sigs.k8s.io/jobset-name": "train",
           "jobset.sigs.k8s.io/replicatedjob-name": "workers",
           "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/restart-attempt": "0"}, {})
LWS = ({"leaderworkerset.sigs.k8s.io/name": "infer",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/worker-index": "1"},
       {"leaderworkerset.sigs.k8s.io/size": "2"})
# as the webhook sees a leader: LWS's own pod webhook adds its group index after ours
LWS_LEADER = ({"leaderworkerset.sigs.k8s.io/name": "infer"},
              {"leaderworkerset.sigs.k8s.io/size": "2"})
KUEUE = ({"kueue.x-k8s.io/pod-group-name": "kq"}, {"kueue.x-k8s.io/pod-group-total-count": "2"})


def member(labels: dict, annotations: dict, *, gpus: list[bool] = (True,),
           init: bool = False, env: list[dict] | None = None, **spec: Any) -> dict:
    def container(name: str, asks: bool) -> dict:
        c: dict[str, Any] = {"name": name, "image": "trainer"}
        if asks:
            c["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
        if env is not None:
            c["env"] = [dict(e) for e in env]
        return c
    body: dict[str, Any] = {"schedulerName": "gpu-scheduler",
                            "containers": [container(f"c{i}", a) for i, a in enumerate(gpus)],
                            **spec}
    if init:
        body["initContainers"] = [container("warm", False)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "train-", "labels": dict(labels),
                         "annotations": dict(annotations)},
            "spec": body}


def admitted(pod: dict, **kw: Any) -> tuple[dict, list[str]]:
    response = mutate_review(review(pod), **kw)["response"]
    assert response["allowed"] is True
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return apply_patch(pod, ops), response.get("warnings", [])


def envs(pod: dict, kind: str = "containers") -> list[list[dict]]:
    return [c.get("env", []) for c in pod["spec"].get(kind) or []]


@pytest.mark.parametrize("labels, annotations", [EXPLICIT, JOBSET, LWS, LWS_LEADER, KUEUE],
                         ids=["explicit", "jobset", "leaderworkerset", "lws-leader", "kueue"])
def test_every_gpu_container_of_a_member_gets_the_reference(labels, annotations) -> None:
    pod, warnings = admitted(member(labels, annotations, gpus=[True, False, True], init=True,
                                    env=[{"name": "RANK", "value": "0"}]))
    assert envs(pod) == [[{"name": "RANK", "value": "0"}, REF],
                         [{"name": "RANK", "value": "0"}],  # asks no GPU
                         [{"name": "RANK", "value": "0"}, REF]]
    assert envs(pod, "initContainers") == [[{"name": "RANK", "value": "0"}]]
    assert warnings == []


def test_a_member_whose_containers_ask_no_gpu_gets_it_in_every_container() -> None:
    pod, _ = admitted(member(*EXPLICIT, gpus=[False, False], init=True))
    assert envs(pod) == [[REF], [REF]]
    assert envs(pod, "initContainers") == [[REF]]


def test_a_member_whose_size_is_unreadable_still_gets_it() -> None:
    """The manager refuses the group with an Event and places none of it; once its
    size is fixed it is placed, and its env can no longer be changed."""
    labels, _ = EXPLICIT
    pod, _ = admitted(member(labels, {"gpu.orchestrator.dev/pod-group-size": "many"}))
    assert envs(pod) == [[REF]]


@pytest.mark.parametrize("pod", [
    member({"app": "x"}, {}),                                       # in no group
    member({"batch.kubernetes.io/job-completion-index": "0"}, {}),  # a Job's: unknown here
    member(*EXPLICIT, nodeName="node1"),                            # bound by its author
    member(*EXPLICIT, schedulerName="default-scheduler"),           # not ours to bind
], ids=["no-group", "indexed-job", "node-name", "other-scheduler"])
def test_other_pods_are_left_as_they_are(pod: dict) -> None:
    response = mutate_review(review(pod))["response"]
    assert response == {"uid": "u-1", "allowed": True}


def test_a_tenants_value_is_replaced_with_a_warning_and_duplicates_dropped() -> None:
    forged = [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3"},
              {"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
                  "fieldPath": "metadata.annotations['mine']"}}}]
    pod, warnings = admitted(member(*EXPLICIT, env=forged))
    assert envs(pod) == [[REF]]
    assert warnings == ["container 'c0': replaced CUDA_VISIBLE_DEVICES=0,1,2,3 with a "
                        "reference to the annotation gpu.orchestrator.dev/devices"]


def test_admitting_a_member_again_changes_nothing() -> None:
    once, _ = admitted(member(*JOBSET, gpus=[True, True]))
    assert group_patch(once, "gpu-scheduler") == ([], [])
    # kube-apiserver leaves the reference as it was written; one without apiVersion
    # (defaulted later) is the same reference
    bare = member(*JOBSET, env=[{"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {
        "fieldRef": {"fieldPath": DEVICES_FIELD_PATH}}}])
    assert group_patch(bare, "gpu-scheduler") == ([], [])


def test_a_member_with_a_map_gets_the_reference_too() -> None:
    """Its group is placed by the map, by its index in the group (which a pod
    cannot tell at admission), and the Binding writes the map's devices: the
    reference reads them. (Before, it got the line of its name's ordinal as a
    value, while its group was placed without the map: two different devices.)"""
    pod = member(*EXPLICIT)
    pod["metadata"]["name"] = "check-1"
    pod["metadata"]["annotations"]["gpu-scheduling-map"] = "1=node2:2"
    out, _ = admitted(pod)
    assert envs(out) == [[REF]]


def test_a_member_with_a_malformed_map_is_refused() -> None:
    pod = member(*EXPLICIT)
    pod["metadata"]["annotations"]["gpu-scheduling-map"] = "1=node2"
    response = mutate_review(review(pod))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("annotation gpu-scheduling-map: line 1")


def nvidia(labels: dict, annotations: dict, **kw: Any) -> dict:
    """A member asking nvidia-visible-devices in its own annotation."""
    return member(labels, {**annotations, MODE: "nvidia-visible-devices"}, **kw)


@pytest.mark.parametrize("labels, annotations", [EXPLICIT, JOBSET, LWS, KUEUE],
                         ids=["explicit", "jobset", "leaderworkerset", "kueue"])
def test_in_nvidia_mode_each_gpu_container_reads_the_device_uuids(labels, annotations) -> None:
    """NVIDIA_VISIBLE_DEVICES from the UUIDs the Binding writes, and no
    CUDA_VISIBLE_DEVICES: the runtime shows exactly those GPUs, numbered from 0
    (before, a member got the host indices whatever its mode)."""
    pod, warnings = admitted(nvidia(labels, annotations, gpus=[True, False], init=True,
                                    env=[{"name": "RANK", "value": "0"}]))
    assert envs(pod) == [[{"name": "RANK", "value": "0"}, UUIDS],
                         [{"name": "RANK", "value": "0"}]]
    assert envs(pod, "initContainers") == [[{"name": "RANK", "value": "0"}]]
    assert warnings == []
    assert reads_uuids(pod)


def test_the_webhooks_default_mode_gives_the_uuids_to_a_member_without_its_own() -> None:
    pod, _ = admitted(member(*JOBSET), default_exposure=DeviceExposure.NVIDIA_VISIBLE_DEVICES)
    assert envs(pod) == [[UUIDS]]
    # its own annotation wins over the default
    labels, annotations = JOBSET
    pod, _ = admitted(member(labels, {**annotations, MODE: "cuda-visible-devices"}),
                      default_exposure=DeviceExposure.NVIDIA_VISIBLE_DEVICES)
    assert envs(pod) == [[REF]]
    assert not reads_uuids(pod)


def test_in_nvidia_mode_a_tenants_device_variables_are_replaced_or_removed() -> None:
    """A host index in CUDA_VISIBLE_DEVICES would name another GPU, or none, in a
    container numbered from 0: it goes, with a warning, as the devices reference
    does; a value of NVIDIA_VISIBLE_DEVICES is replaced by the reference."""
    forged = [{"name": "CUDA_VISIBLE_DEVICES", "value": "4,5"}, REF,
              {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
              {"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]
    pod, warnings = admitted(nvidia(*EXPLICIT, env=forged))
    assert envs(pod) == [[UUIDS]]
    assert warnings == [
        "container 'c0': removed CUDA_VISIBLE_DEVICES=4,5: the container runtime shows "
        "exactly the devices of NVIDIA_VISIBLE_DEVICES, numbered from 0",
        "container 'c0': removed CUDA_VISIBLE_DEVICES=<valueFrom>: the container runtime "
        "shows exactly the devices of NVIDIA_VISIBLE_DEVICES, numbered from 0",
        "container 'c0': replaced NVIDIA_VISIBLE_DEVICES=all with a reference to the "
        "annotation gpu.orchestrator.dev/device-uuids"]


def test_in_nvidia_mode_admitting_a_member_again_changes_nothing() -> None:
    once, _ = admitted(nvidia(*JOBSET, gpus=[True, True]))
    assert group_patch(once, "gpu-scheduler") == ([], [])
    bare = nvidia(*JOBSET, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
        "fieldRef": {"fieldPath": DEVICE_UUIDS_FIELD_PATH}}}])
    assert group_patch(bare, "gpu-scheduler") == ([], [])


@pytest.mark.parametrize("mode, says", [
    ("device-plugin", "device exposure 'device-plugin' is not given to a pod group's member: "
                      "the device plugin would pick its devices, not the ones its group is "
                      "placed on (use cuda-visible-devices, nvidia-visible-devices or dra)"),
    ("nvidia", "unknown device exposure 'nvidia'"),
])
def test_a_member_asking_a_mode_it_cannot_have_is_refused(mode: str, says: str) -> None:
    labels, annotations = JOBSET
    pod = member(labels, {**annotations, MODE: mode})
    response = mutate_review(review(pod))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(
        f"annotation gpu.orchestrator.dev/device-exposure: {says}"), response


def test_a_device_plugin_default_leaves_a_member_its_devices_reference() -> None:
    """A group is always placed on named devices: a cluster whose seed pods default
    to the device plugin does not refuse every gang's pods."""
    pod, _ = admitted(member(*JOBSET), default_exposure=DeviceExposure.DEVICE_PLUGIN)
    assert envs(pod) == [[REF]]


def dra_member(annotations: dict | None = None, *, gpus: bool = False,
               claims: bool = True) -> dict:
    """A JobSet member as a user of NVIDIA's DRA driver writes it: a claim made from a
    template, listed in its container's resources.claims."""
    labels, base = JOBSET
    pod = member(labels, {**base, **(annotations or {})}, gpus=[gpus],
                 env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])
    if claims:
        pod["spec"]["resourceClaims"] = [{"name": "gpus",
                                          "resourceClaimTemplateName": "two-gpus"}]
        pod["spec"]["containers"][0].setdefault("resources", {})["claims"] = [
            {"name": "gpus"}]
    return pod


@pytest.mark.parametrize("annotations, default", [
    ({MODE: "dra"}, DeviceExposure.CUDA_VISIBLE_DEVICES),
    ({}, DeviceExposure.DRA),
    ({}, DeviceExposure.CUDA_VISIBLE_DEVICES),  # it names a claim: its devices come there
], ids=["own-annotation", "webhook-default", "claim-only"])
def test_a_dra_member_with_a_claim_is_admitted_without_a_devices_variable(
        annotations: dict, default: DeviceExposure) -> None:
    pod = dra_member(annotations)
    admitted_pod, warnings = admitted(pod, default_exposure=default)
    # nothing injected, its own env left as it was: the driver shows it its devices
    assert admitted_pod == pod
    assert warnings == []


def test_a_dra_member_without_a_claim_is_refused_with_the_reason() -> None:
    response = mutate_review(review(dra_member({MODE: "dra"}, claims=False)))["response"]
    assert response["allowed"] is False
    assert "device exposure 'dra' for a pod group's member needs its ResourceClaim: " \
           "spec.resourceClaims names none" in response["status"]["message"], response


def test_a_dra_member_asking_nvidia_gpu_too_is_refused() -> None:
    response = mutate_review(review(dra_member({MODE: "dra"}, gpus=True)))["response"]
    assert response["allowed"] is False
    assert "requests nvidia.com/gpu: the device plugin would hand it GPUs beside its " \
           "claim's" in response["status"]["message"], response


def test_a_dra_default_leaves_a_member_without_a_claim_its_devices_reference() -> None:
    """A cluster default of dra does not refuse the members that name no claim."""
    pod, _ = admitted(member(*JOBSET), default_exposure=DeviceExposure.DRA)
    assert envs(pod) == [[REF]]


def test_a_member_with_a_claim_and_nvidia_gpu_and_no_mode_keeps_its_reference() -> None:
    """Its claim is for something else (a NIC): admitted as before, in the webhook's
    mode."""
    pod, _ = admitted(dra_member(gpus=True))
    assert [e for e in envs(pod)[0] if e["name"] == "CUDA_VISIBLE_DEVICES"] == [REF]


@pytest.mark.parametrize("mode", ["cuda-visible-devices", "nvidia-visible-devices"])
@pytest.mark.parametrize("gpus", [False, True], ids=["claim-only", "claim-and-gpu"])
def test_a_member_naming_a_claim_with_a_mode_of_its_own_other_than_dra_is_refused(
        mode: str, gpus: bool) -> None:
    """Only a dra member's claim is allocated by the binder: one in another mode of its
    own would be bound with its claim unallocated, and the kubelet never starts it."""
    response = mutate_review(review(dra_member({MODE: mode}, gpus=gpus)))["response"]
    assert response["allowed"] is False
    assert f"device exposure {mode!r} for a pod group's member that names a " \
           "ResourceClaim: its claim would not be allocated" in \
           response["status"]["message"], response
    assert "(use dra, or drop the claim)" in response["status"]["message"]
