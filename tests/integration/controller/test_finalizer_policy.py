"""The finalizer arrives with the object: on a kube-apiserver that serves
MutatingAdmissionPolicy (1.34: its feature gate and ``admissionregistration.k8s.io/
v1beta1`` switched on, etcd and kube-apiserver alone), ``config/admission-finalizer``
puts ``gpu.orchestrator.dev/children`` into the create itself, once, beside a user's
own finalizers; and a workload that got it so, never placed, is still deleted as soon
as it is asked to (the manager removes it: nothing of its own is left)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from api.v1alpha1.keys import CHILDREN_FINALIZER
from hack.testenv import ControlPlane
from runtime import Client, NotFound, RestConfig
from tests.integration.controller.conftest import ROOT, get_workload, workload
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


def test_the_finalizer_arrives_in_the_create(gated: ControlPlane, tmp_path: Path) -> None:
    admin = Client(RestConfig.from_kubeconfig(str(gated.kubeconfig)))
    # a new policy applies once kube-apiserver has loaded it (a moment)
    eventually(lambda: created_finalizers(admin, "probe", dry_run=True) == [CHILDREN_FINALIZER],
               timeout=60, what="the policy in force")
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
