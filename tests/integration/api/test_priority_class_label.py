"""``workload-priority-class`` costs a create that names no PriorityClass nothing:
the finalizer's MutatingAdmissionPolicy labels it ``names-priority-class: "false"``
(over any value the user sent) and the policy's binding skips that label, before
kube-apiserver lists a param per PriorityClass. A user's own ``"false"`` beside a
class name (where the mutating policy is absent) is refused, so the label never
skips a check that had something to check; a class with the wrong priority is
refused with the class's message as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.v1alpha1.keys import CHILDREN_FINALIZER, NAMES_CLASS_LABEL
from hack.testenv import ControlPlane
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[3]
GATED = ("--feature-gates=MutatingAdmissionPolicy=true",
         "--runtime-config=admissionregistration.k8s.io/v1beta1=true")
NAMESPACE = "class-label"
CLASS_MESSAGE = "priorityClassName {} has the value 1000: spec.priority must be 1000 (it is 5)"


def _apply_class(cp: ControlPlane, name: str) -> None:
    cp.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name}, "value": 1000}))


def _create(cp: ControlPlane, ns: str, name: str, labels: dict[str, str] | None = None,
            dry_run: bool = False, **spec: object):
    body = {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"gpuCount": 1, **spec}}
    args = ["create", "-o", "json", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    return cp.kubectl(*args, input=json.dumps(body), check=False)


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    cp = ControlPlane(tmp_path_factory.mktemp("map"), api_only=True, apiserver_flags=GATED)
    cp.start()
    try:
        cp.kubectl("apply", "-k", str(ROOT / "config" / "crd"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                   "crd/gpuworkloads.gpu.orchestrator.dev")
        cp.kubectl("apply", "-k", str(ROOT / "config" / "admission-finalizer"))
        cp.kubectl("create", "namespace", NAMESPACE)
        _apply_class(cp, "team-high")
        yield cp
    finally:
        cp.stop()


def _in_force(cp: ControlPlane) -> bool:
    r = _create(cp, NAMESPACE, "probe", dry_run=True)
    return r.returncode == 0 and json.loads(r.stdout)["metadata"].get("finalizers") == [
        CHILDREN_FINALIZER]


def _label(r) -> str | None:
    assert r.returncode == 0, r.stderr
    return (json.loads(r.stdout)["metadata"].get("labels") or {}).get(NAMES_CLASS_LABEL)


def test_the_create_is_labelled_by_whether_it_names_a_class(gated: ControlPlane) -> None:
    eventually(lambda: _in_force(gated), timeout=60, what="the finalizer policy in force")
    assert _label(_create(gated, NAMESPACE, "plain")) == "false"
    assert _label(_create(gated, NAMESPACE, "classed", priorityClassName="team-high",
                          priority=1000)) == "true"
    # the user's "false" is overwritten from the spec: the class is still checked
    r = _create(gated, NAMESPACE, "forged", {NAMES_CLASS_LABEL: "false", "team": "a"},
                priorityClassName="team-high", priority=5)
    assert r.returncode != 0
    assert CLASS_MESSAGE.format("team-high") in r.stderr
    # a user's own "true" beside no class is set right, and their other labels stay
    labels = json.loads(_create(gated, NAMESPACE, "mine", {NAMES_CLASS_LABEL: "true",
                                                           "team": "a"}).stdout)
    assert labels["metadata"]["labels"] == {NAMES_CLASS_LABEL: "false", "team": "a"}


@pytest.fixture(scope="module")
def crds(cluster) -> Iterator[ControlPlane]:
    cluster.kubectl("apply", "-k", str(ROOT / "config" / "crd"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/gpuworkloads.gpu.orchestrator.dev")
    _apply_class(cluster, "class-label-high")
    try:
        yield cluster
    finally:
        cluster.kubectl("delete", "priorityclass", "class-label-high", check=False)


def test_a_users_false_beside_a_class_is_refused_without_the_mutating_policy(
        crds: ControlPlane, namespace: str) -> None:
    r = _create(crds, namespace, "forged", {NAMES_CLASS_LABEL: "false"},
                priorityClassName="class-label-high", priority=5)
    assert r.returncode != 0
    assert (f"the {NAMES_CLASS_LABEL} label is 'false' but spec.priorityClassName names "
            "class-label-high: the label is set by admission") in r.stderr
    # unlabelled, the class is checked as it always was
    r = _create(crds, namespace, "unlabelled", priorityClassName="class-label-high",
                priority=5)
    assert r.returncode != 0
    assert CLASS_MESSAGE.format("class-label-high") in r.stderr
    # "false" with no class skips a check that had nothing to check
    assert _label(_create(crds, namespace, "plain", {NAMES_CLASS_LABEL: "false"})) == "false"
