"""A pod group's member gets CUDA_VISIBLE_DEVICES as a reference to its devices
annotation (in nvidia-visible-devices mode NVIDIA_VISIBLE_DEVICES as one to its
device UUIDs annotation), on the real kube-apiserver: the webhook of config/webhook
injects it, the pod-devices policy (api/v1alpha1/pod_devices.py) admits exactly
those references from a tenant and refuses what a tenant could forge (a value, or
the UUIDs annotation itself), and the Binding's annotation is what the reference
reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import (
    DEVICE_UUIDS_ANNOTATION,
    DEVICE_UUIDS_FIELD_PATH,
    DEVICES_ANNOTATION,
    DEVICES_FIELD_PATH,
)
from hack.testenv import ControlPlane
from internal.scheduling.podgroups import pod_group
from runtime import Client, errors
from tests.integration.webhook.helpers import pod_devices_policy, running_webhook
from tests.waiting import eventually

ONLY_OURS = "only the gpu-orchestrator controller and webhook give pods GPU devices"
REF = {"name": "CUDA_VISIBLE_DEVICES",
       "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": DEVICES_FIELD_PATH}}}
UUIDS = {"name": "NVIDIA_VISIBLE_DEVICES",
         "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": DEVICE_UUIDS_FIELD_PATH}}}
TENANT = "group-tenant"


@pytest.fixture(scope="module")
def policy(cluster: ControlPlane) -> Iterator[str]:
    with pod_devices_policy(cluster) as suffix:
        yield suffix


@pytest.fixture(scope="module")
def webhook(cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_webhook(cluster, tmp_path_factory.mktemp("group-certs")) as (_, name):
        probe = member("probe", {"gpu.orchestrator.dev/pod-group": "probe"})

        def answers() -> bool:
            code, body = cluster.api("POST", "/api/v1/namespaces/default/pods?dryRun=All", probe)
            return code == 201 and body["spec"]["containers"][0].get("env") == [REF]

        eventually(answers, timeout=30, what="the webhook answers kube-apiserver")
        yield name


@pytest.fixture
def tenant(cluster: ControlPlane, namespace: str, policy: str) -> Client:
    """A user who may create pods and Jobs in ``namespace``, once the policy refuses
    a forged pod of theirs (the API server loads a new policy within seconds)."""
    admin = Client.from_kubeconfig(str(cluster.kubeconfig))
    rules = [{"apiGroups": [""], "resources": ["pods"],
              "verbs": ["create", "get", "list", "patch"]},
             {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]
    admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                  "metadata": {"name": "pods", "namespace": namespace}, "rules": rules})
    admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                  "metadata": {"name": "pods", "namespace": namespace},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                              "name": "pods"},
                  "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                "name": TENANT}]})
    c = admin.impersonate(TENANT, ["system:authenticated"])
    forged = plain("probe", [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])

    def refused() -> bool:
        try:
            c.create(forged, namespace=namespace, dry_run=True)
        except errors.Forbidden as exc:
            return ONLY_OURS in str(exc)
        return False

    eventually(refused, timeout=30, what="the pod-devices policy loaded")
    return c


def member(name: str, labels: dict[str, str], env: list[dict] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "trainer", "image": "trainer:1",
                         "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    if env is not None:
        c["env"] = env
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"gpu.orchestrator.dev/pod-group-size": "2"}},
            "spec": {"schedulerName": "gpu-scheduler", "containers": [
                c, {"name": "sidecar", "image": "log:1"}]}}


def plain(name: str, env: list[dict]) -> dict[str, Any]:
    """A pod no hook of the webhook is sent (default scheduler, no GPU request)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "x", "env": env,
                                     "resources": {"limits": {"cpu": "1"}}}]}}


JOBSET_LABELS = {"jobset.sigs.k8s.io/jobset-name": "train",
                 "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                 "jobset.sigs.k8s.io/job-index": "0",
                 "jobset.sigs.k8s.io/restart-attempt": "0"}


@pytest.mark.parametrize("labels", [{"gpu.orchestrator.dev/pod-group": "ring"}, JOBSET_LABELS],
                         ids=["explicit", "jobset"])
def test_a_member_made_by_a_tenant_reads_its_devices_from_the_binding(
        cluster: ControlPlane, webhook: str, tenant: Client, namespace: str,
        labels: dict[str, str]) -> None:
    made = tenant.create(member("ring-0", labels), namespace=namespace)
    containers = made["spec"]["containers"]
    assert containers[0]["env"] == [REF]   # the GPU container
    assert "env" not in containers[1]      # the sidecar asks no GPU
    # the binder's Binding writes the annotation the reference reads
    admin = Client.from_kubeconfig(str(cluster.kubeconfig))
    admin.create_subresource("v1", "Pod", "ring-0", "binding", {
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "ring-0", "annotations": {DEVICES_ANNOTATION: "4,5,6,7"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-1"}},
        namespace=namespace)
    bound = admin.get("v1", "Pod", "ring-0", namespace)
    assert bound["metadata"]["annotations"][DEVICES_ANNOTATION] == "4,5,6,7"
    assert bound["spec"]["containers"][0]["env"] == [REF]


FORGED = {
    "literal": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3"}],
    "another annotation": [{"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['mine']"}}}],
    "a label": [{"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.labels['gpus']"}}}],
    "a resource": [{"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"resourceFieldRef": {
        "resource": "limits.cpu"}}}],
    "a config map": [{"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {
        "name": "gpus", "key": "devices"}}}],
    "the reference and NVIDIA_VISIBLE_DEVICES": [
        REF, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
    "NVIDIA_VISIBLE_DEVICES from the annotation": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
            "fieldPath": DEVICES_FIELD_PATH}}}],
    "NVIDIA_VISIBLE_DEVICES a literal UUID": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-0aa1b2c3"}],
    "NVIDIA_VISIBLE_DEVICES from another annotation": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
            "fieldPath": "metadata.annotations['mine']"}}}],
    "CUDA_VISIBLE_DEVICES from the UUIDs annotation": [
        {"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
            "fieldPath": DEVICE_UUIDS_FIELD_PATH}}}],
}


@pytest.mark.parametrize("env", FORGED.values(), ids=FORGED.keys())
def test_what_a_tenant_could_forge_is_refused(tenant: Client, namespace: str,
                                              env: list[dict]) -> None:
    with pytest.raises(errors.Forbidden, match=ONLY_OURS):
        tenant.create(plain("forged", env), namespace=namespace)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "forged"},
           "spec": {"template": {"spec": {**plain("x", env)["spec"], "restartPolicy": "Never"}}}}
    with pytest.raises(errors.Forbidden, match=ONLY_OURS):
        tenant.create(job, namespace=namespace)


@pytest.mark.parametrize("ref", [REF, UUIDS], ids=["devices", "device-uuids"])
def test_the_reference_itself_is_admitted_from_a_tenant(tenant: Client, namespace: str,
                                                        ref: dict) -> None:
    """It reads only what the binder wrote: a pod, or an Indexed Job's template (whose
    pods the webhook cannot tell from any other Job's), may carry it."""
    made = tenant.create(plain("ref", [ref]), namespace=namespace)
    assert made["spec"]["containers"][0]["env"] == [ref]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ranks"},
           "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                    "template": {"spec": {**plain("x", [ref])["spec"],
                                          "restartPolicy": "Never"}}}}
    tenant.create(job, namespace=namespace, dry_run=True)


def test_a_tenant_cannot_write_the_uuids_a_reference_reads(
        tenant: Client, namespace: str) -> None:
    """Else a tenant would choose the GPUs its NVIDIA_VISIBLE_DEVICES resolves to:
    refused on a pod it creates (with the reference or not), on an update of its pod,
    and in a Job's template."""
    forged = {DEVICE_UUIDS_ANNOTATION: "GPU-someone-elses"}
    binder_only = f"the {DEVICE_UUIDS_ANNOTATION} annotation of a pod is written by the pod binding"
    for env in ([UUIDS], []):
        pod = plain("forged", env)
        pod["metadata"]["annotations"] = forged
        with pytest.raises(errors.Forbidden, match=binder_only):
            tenant.create(pod, namespace=namespace)
    tenant.create(plain("mine", [UUIDS]), namespace=namespace)
    with pytest.raises(errors.Forbidden, match=binder_only):
        tenant.patch("v1", "Pod", "mine", {"metadata": {"annotations": forged}},
                     namespace=namespace)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "forged"},
           "spec": {"template": {"metadata": {"annotations": forged},
                                 "spec": {**plain("x", [UUIDS])["spec"],
                                          "restartPolicy": "Never"}}}}
    with pytest.raises(errors.Forbidden, match=ONLY_OURS):
        tenant.create(job, namespace=namespace)


def test_a_member_in_nvidia_mode_made_by_a_tenant_reads_the_uuids(
        webhook: str, tenant: Client, namespace: str) -> None:
    """Our webhook gives it the UUIDs reference (and drops a CUDA_VISIBLE_DEVICES of
    its own, which the policy would refuse), and the policy admits it."""
    pod = member("nv-0", {"gpu.orchestrator.dev/pod-group": "nv"},
                 env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}])
    pod["metadata"]["annotations"]["gpu.orchestrator.dev/device-exposure"] = \
        "nvidia-visible-devices"
    made = tenant.create(pod, namespace=namespace)
    assert made["spec"]["containers"][0]["env"] == [UUIDS]
    assert "env" not in made["spec"]["containers"][1]


def test_an_indexed_jobs_pods_are_one_group_and_read_their_devices(
        cluster: ControlPlane, webhook: str, tenant: Client, namespace: str) -> None:
    """The real job controller makes the pods: each is recognised, through the live
    Job, as a member of one group of 3 with its own index, and carries the reference
    its template gave it (the webhook cannot tell such a Job's pods: docs/podgroups.md)."""
    admin = Client.from_kubeconfig(str(cluster.kubeconfig))
    spec = {"schedulerName": "gpu-scheduler", "restartPolicy": "Never", "containers": [
        {"name": "rank", "image": "trainer:1", "env": [REF],
         "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}
    tenant.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ranks"},
                   "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3,
                            "template": {"spec": spec}}}, namespace=namespace)

    def owners(api: str, kind: str, ns: str, name: str) -> dict | None:
        try:
            return dict(admin.get(api, kind, name, ns))
        except errors.NotFound:
            return None

    def pods() -> list[dict]:
        return admin.list("v1", "Pod", namespace=namespace)["items"]

    eventually(lambda: len(pods()) == 3, timeout=60, what="the job controller made 3 pods")
    groups = [pod_group(p, owners) for p in pods()]
    assert {g.key for g in groups} == {f"{namespace}/job:ranks"}, groups
    assert {g.size for g in groups} == {3}
    assert sorted(g.index for g in groups) == [0, 1, 2]
    assert [p["spec"]["containers"][0]["env"][0] for p in pods()] == [REF] * 3
