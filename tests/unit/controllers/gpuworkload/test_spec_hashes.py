"""A child's spec hash is remembered per workload: the same hash as the template and
replica count hashed afresh (so children made before keep matching), hashed once
while the spec model is the same, hashed again after an edit (a new generation, a
spec changed without one, another replica count, the workload re-created), and the
memory stays bounded. Through the reconciler: an edit of a running workload's
template still restarts it, and its new pod carries the new hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from api.v1alpha1.keys import SPEC_HASH_ANNOTATION
from api.v1alpha1.types import API_VERSION, GPUWorkload
from controllers.gpuworkload import children
from controllers.gpuworkload.children import SpecHashes, spec_hash
from controllers.gpuworkload.models import WorkloadModels
from runtime.store import freeze
from tests.unit.controllers.fakes import Env

TEMPLATE = {"metadata": {"labels": {"app": "train"}},
            "spec": {"containers": [{"name": "main", "image": "registry.local/train:1.4",
                                     "env": [{"name": "B", "value": "2"},
                                             {"name": "A", "value": "1"}]}]}}


def cached(rv: str, uid: str = "u1", generation: int = 1, replicas: int = 1,
           template: dict[str, Any] | None = None) -> Any:
    return freeze({"apiVersion": API_VERSION, "kind": "GPUWorkload",
                   "metadata": {"name": "w", "namespace": "ns", "uid": uid,
                                "resourceVersion": rv, "generation": generation},
                   "spec": {"gpusPerReplica": 1, "replicas": replicas,
                            "template": template if template is not None else TEMPLATE},
                   "status": {"phase": "Pending"}})


def afresh(template: Any, replicas: int) -> str:
    """The hash as children were annotated with before it was remembered."""
    body = json.dumps({"template": template or {}, "replicas": replicas},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@pytest.fixture
def digests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the templates serialized and hashed."""
    calls: list[int] = []
    real = children._digest

    def counting(template: Any, replicas: int) -> str:
        calls.append(replicas)
        return real(template, replicas)

    monkeypatch.setattr(children, "_digest", counting)
    return calls


def test_the_hash_is_the_one_of_the_template_and_replicas_hashed_afresh() -> None:
    models = WorkloadModels()
    for rv, replicas in (("1", 1), ("2", 1), ("3", 4)):
        w = models.model(cached(rv, replicas=replicas, generation=int(rv)))
        assert spec_hash(w) == spec_hash(w) == afresh(TEMPLATE, replicas)
    assert afresh(TEMPLATE, 1) == "77d2b7bd8869440e"  # what earlier children carry


def test_versions_of_one_generation_hash_the_template_once(digests: list[int]) -> None:
    models, hashes = WorkloadModels(), SpecHashes()
    got = {hashes.of(models.model(cached(str(rv)))) for rv in range(1, 6)}
    assert got == {afresh(TEMPLATE, 1)}
    assert len(digests) == 1


def test_an_edit_is_hashed_again(digests: list[int]) -> None:
    models, hashes = WorkloadModels(), SpecHashes()
    edited = {**TEMPLATE, "spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}
    before = hashes.of(models.model(cached("1")))
    # a new generation; a spec changed without one (a writer that does not raise
    # it); another replica count; the same name re-created (a new UID)
    for raw, template, replicas in ((cached("2", generation=2, template=edited), edited, 1),
                                    (cached("3", generation=2), TEMPLATE, 1),
                                    (cached("4", generation=3, replicas=3), TEMPLATE, 3),
                                    (cached("5", uid="u2", template=edited), edited, 1)):
        assert hashes.of(models.model(raw)) == afresh(template, replicas)
    assert before != afresh(edited, 1)
    assert len(digests) == 5


def test_a_replica_count_set_on_the_same_spec_model_is_hashed_again() -> None:
    hashes = SpecHashes()
    w = GPUWorkload.model_validate(cached("1"))
    assert hashes.of(w) == afresh(TEMPLATE, 1)
    w.spec.replicas = 2
    assert hashes.of(w) == afresh(TEMPLATE, 2)


def test_a_workload_without_a_uid_is_hashed_every_time(digests: list[int]) -> None:
    hashes = SpecHashes()
    raw = cached("1", uid="")
    w = GPUWorkload.model_validate(raw)
    assert hashes.of(w) == hashes.of(w) == afresh(TEMPLATE, 1)
    assert len(digests) == 2 and len(hashes) == 0


def test_the_memory_is_bounded() -> None:
    hashes = SpecHashes(size=8)
    models = WorkloadModels()
    for i in range(100):
        w = models.model(cached("1", uid=f"u{i}"))
        assert hashes.of(w) == afresh(TEMPLATE, 1)
        assert len(hashes) <= 8


def test_a_template_edit_of_a_running_workload_restarts_it_with_the_new_hash() -> None:
    env = Env(nodes=2, gpus=2)
    env.workload("w", gpusPerReplica=1)
    env.settle("w")
    env.set_phase("w-0", "Running")
    env.settle("w")
    first = env.pod("w-0")
    assert first is not None
    tpl = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    assert first["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == afresh(tpl, 1)

    def edit(o: dict[str, Any]) -> None:
        o["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.37"
        o["metadata"]["generation"] = 2

    env.edit("w", edit)
    env.settle("w")
    assert env.condition("w", "Scheduled")["reason"] == "SpecChanged"
    assert env.client.names("delete", "Pod") == ["w-0"]
    env.pod_gone("w-0")
    env.settle("w")
    again = env.pod("w-0")
    assert again is not None
    tpl["spec"]["containers"][0]["image"] = "busybox:1.37"
    assert again["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == afresh(tpl, 1)


def test_a_running_workloads_reconcile_reads_its_children_once(
        monkeypatch: pytest.MonkeyPatch, digests: list[int]) -> None:
    """The spec check reads the children the attempt already read, and the hash
    the pod was built with."""
    env = Env(nodes=2, gpus=2)
    env.workload("w", gpusPerReplica=1)
    env.settle("w")
    env.set_phase("w-0", "Running")
    env.settle("w")
    children_api = env.rec.attempts.children
    reads: list[str] = []
    real = children_api.by_attempt

    def counting(raw: Any, kind: str, attempt: str) -> Any:
        reads.append(attempt)
        return real(raw, kind, attempt)

    monkeypatch.setattr(children_api, "by_attempt", counting)
    hashed = len(digests)
    for _ in range(3):
        env.reconcile("w")
    assert reads == ["0", "0", "0"]
    assert len(digests) == hashed
    assert env.status("w")["phase"] == "Running"
