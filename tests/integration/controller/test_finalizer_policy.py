"""The finalizer arrives with the object: on a kube-apiserver that serves
MutatingAdmissionPolicy (1.34: its feature gate and ``admissionregistration.k8s.io/
v1beta1`` switched on, etcd and kube-apiserver alone), ``config/admission-finalizer``
puts ``gpu.orchestrator.dev/children`` into the create itself, once, beside a user's
own finalizers; and a workload that got it so, never placed, is still deleted as soon
as it is asked to (the manager removes it: nothing of its own is left).

On the session cluster (no policy): a workload created with the finalizer, as the
policy leaves it, is placed without the manager writing its finalizers; one created
without gets it from the manager's patch (the fallback), and both delete."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from api.v1alpha1.keys import CHILDREN_FINALIZER
from hack.testenv import ControlPlane
from runtime import Client, NotFound, RestConfig
from runtime.errors import ServiceUnavailable
from tests.integration.controller.conftest import (
    ROOT,
    NodeGroup,
    Running,
    delete_workload,
    get_workload,
    wait_phase,
    workload,
)
from tests.integration.manager_process import ManagerProcess
from tests.waiting import eventually

NAMESPACE = "finalizer-policy"
GATED = ("--feature-gates=MutatingAdmissionPolicy=true",
         "--runtime-config=admissionregistration.k8s.io/v1beta1=true")


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("map"), api_only=True, apiserver_flags=GATED)
    cp.start()
    try:
        cp.kubectl("apply", "-k", str(Path(ROOT) / "config" / "crd"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                   "crd/gpuworkloads.gpu.orchestrator.dev")
        cp.kubectl("apply", "-k", str(Path(ROOT) / "config" / "admission-finalizer"))
        cp.kubectl("create", "namespace", NAMESPACE)
        yield cp
    finally:
        cp.stop()


def created_finalizers(c: Client, name: str, *finalizers: str, dry_run: bool = False
                       ) -> list[str]:
    body = workload(name, NAMESPACE, gpuCount=1)
    if finalizers:
        body["metadata"]["finalizers"] = list(finalizers)
    return list(c.create(body, dry_run=dry_run)["metadata"].get("finalizers") or [])


def policy_in_force(c: Client) -> bool:
    """A new policy applies once kube-apiserver has loaded it and its matcher knows
    the new kind: until then a create answers 503 (the kind "not found") or comes
    back without the finalizer."""
    try:
        return created_finalizers(c, "probe", dry_run=True) == [CHILDREN_FINALIZER]
    except ServiceUnavailable:
        return False


def test_the_finalizer_arrives_in_the_create(gated: ControlPlane, tmp_path: Path) -> None:
    admin = Client(RestConfig.from_kubeconfig(str(gated.kubeconfig)))
    eventually(lambda: policy_in_force(admin), timeout=60, what="the policy in force")
    assert created_finalizers(admin, "plain") == [CHILDREN_FINALIZER]
    assert created_finalizers(admin, "theirs", "example.com/keep") == [
        "example.com/keep", CHILDREN_FINALIZER]
    assert created_finalizers(admin, "again", CHILDREN_FINALIZER) == [CHILDREN_FINALIZER]

    m = ManagerProcess(gated, NAMESPACE, "finalizer-policy", tmp_path, "map")
    m.start()
    try:
        eventually(lambda: m.probe("/readyz")[0] == 200, timeout=60,
                   what=f"manager ready; log tail: {m.log}")
        done = gated.kubectl("delete", "gpuworkload", "plain", "-n", NAMESPACE,
                             "--wait", "--timeout=60s", check=False)
        assert done.returncode == 0, done.stderr
        with pytest.raises(NotFound):
            get_workload(admin, NAMESPACE, "plain")
    finally:
        m.stop()


def test_a_finalizer_that_came_with_the_create_is_not_written_again(
        controller: Running, admin: Client, namespace: str, group: NodeGroup,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every patch of a workload's metadata.finalizers this process sends (the manager
    # runs in it; the test itself sends none)
    sent: list[str] = []
    patch = Client.patch

    def recording(self: Client, api_version: str, kind: str, name: str, body: object,
                  *a: object, **kw: object) -> object:
        if kind == "GPUWorkload" and "finalizers" in (
                (body.get("metadata") or {}) if isinstance(body, dict) else {}):
            sent.append(name)
        return patch(self, api_version, kind, name, body, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Client, "patch", recording)
    controller.wait_nodes(group.add(1, gpus=2))
    given = workload("given", namespace, gpusPerReplica=1, nodeSelector=group.selector)
    given["metadata"]["finalizers"] = [CHILDREN_FINALIZER]  # as the policy leaves it
    admin.create(given)
    admin.create(workload("patched", namespace, gpusPerReplica=1,
                          nodeSelector=group.selector))
    placed = wait_phase(admin, namespace, "given", "Running")
    fallback = wait_phase(admin, namespace, "patched", "Running")
    assert placed["metadata"]["finalizers"] == [CHILDREN_FINALIZER]
    assert fallback["metadata"]["finalizers"] == [CHILDREN_FINALIZER]
    assert "given" not in sent and "patched" in sent, sent  # the patch only where needed
    for name in ("given", "patched"):
        delete_workload(admin, namespace, name)

    def gone(name: str) -> bool:
        try:
            get_workload(admin, namespace, name)
        except NotFound:
            return True
        return False
    for name in ("given", "patched"):  # once their pods are gone
        eventually(lambda name=name: gone(name), timeout=60, what=f"{name} deleted")
