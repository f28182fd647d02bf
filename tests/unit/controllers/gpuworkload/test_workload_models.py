"""The reconcile's typed workload: the same cached object gives the same model; a new
version of the same generation reuses its spec (validated and prepared once); an edit
(a new generation), a spec changed without one or a workload re-created under the
same name (a new UID) gets its own; an invalid spec is refused every time; a deleted
workload's entry goes; and the reconciles leave the shared models as they were made."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from api.v1alpha1.types import API_VERSION, GPUWorkload, GPUWorkloadSpec
from controllers.gpuworkload.models import WorkloadModels
from runtime.store import freeze, thaw
from tests.unit.controllers.fakes import Env


def cached(rv: str = "7", uid: str = "u1", generation: int = 1, name: str = "w",
           status: dict[str, Any] | None = None, **spec: Any) -> Any:
    return freeze({"apiVersion": API_VERSION, "kind": "GPUWorkload",
                   "metadata": {"name": name, "namespace": "ns", "uid": uid,
                                "resourceVersion": rv, "generation": generation},
                   "spec": {"gpusPerReplica": 1, **spec},
                   "status": status if status is not None else {"phase": "Pending"}})


def test_the_same_cached_version_is_validated_once() -> None:
    prepared: list[GPUWorkloadSpec] = []
    models = WorkloadModels(prepared.append)
    raw = cached()
    first = models.model(raw)
    assert models.model(raw) is first
    assert prepared == [first.spec]


def test_a_status_write_reuses_the_spec_of_the_same_generation() -> None:
    prepared: list[GPUWorkloadSpec] = []
    models = WorkloadModels(prepared.append)
    first = models.model(cached(rv="7"))
    written = models.model(cached(rv="8", status={"phase": "Running"}))
    assert written is not first
    assert written.status.phase == "Running" and written.metadata.resource_version == "8"
    assert written.spec is first.spec and len(prepared) == 1
    assert (models.spec_hits, models.misses) == (1, 1)


def test_an_edit_is_served_the_new_generations_spec() -> None:
    prepared: list[GPUWorkloadSpec] = []
    models = WorkloadModels(prepared.append)
    first = models.model(cached(rv="7", generation=1, replicas=1))
    edited = models.model(cached(rv="8", generation=2, replicas=3))
    assert edited.spec.replicas == 3 and first.spec.replicas == 1
    assert len(prepared) == 2


def test_a_spec_changed_without_a_new_generation_is_not_served_the_old_one() -> None:
    models = WorkloadModels()
    models.model(cached(rv="7", generation=1, replicas=1))
    assert models.model(cached(rv="8", generation=1, replicas=2)).spec.replicas == 2


def test_a_recreated_workload_is_not_served_the_deleted_ones_spec() -> None:
    models = WorkloadModels()
    models.model(cached(rv="7", uid="old", gpusPerReplica=1))
    # deleted and created again under the same name: generation 1 again, another UID
    again = models.model(cached(rv="9", uid="new", gpusPerReplica=2))
    assert again.spec.gpus == 2 and again.metadata.uid == "new"
    assert models.spec_hits == 0


def test_a_view_with_the_status_we_asked_for_gets_its_own_model() -> None:
    models = WorkloadModels()
    raw = cached()
    assert models.model(raw).status.phase == "Pending"
    view = {**raw, "status": {"phase": "Scheduled"}}  # same version, our status
    assert models.model(view).status.phase == "Scheduled"
    assert models.model(raw).status.phase == "Pending"


def test_other_defaults_prepare_it_again() -> None:
    seen: list[str] = []
    models = WorkloadModels(lambda s: seen.append("prepared"))
    raw = cached()
    models.model(raw, ("leastLoaded",))
    models.model(raw, ("bestFit",))
    models.model(raw, ("bestFit",))
    models.model(cached(rv="8"), ("bestFit",))
    assert seen == ["prepared", "prepared"]


def test_an_invalid_spec_is_refused_every_time() -> None:
    models = WorkloadModels()
    models.model(cached(rv="6"))
    raw = cached(gpusPerReplica="many")
    for _ in range(2):
        with pytest.raises(ValidationError):
            models.model(raw)


def test_it_keeps_one_version_per_workload_and_at_most_size_workloads() -> None:
    models = WorkloadModels(size=2)
    old = cached(rv="1")
    first = models.model(old)
    models.model(cached(rv="2"))  # the newer version replaces it
    assert models.model(old) is not first
    newest = cached(rv="3")
    a = models.model(newest)
    assert models.model(newest) is a
    for i in range(2):
        models.model(cached(rv="1", uid=f"other-{i}", name=f"other-{i}"))
    assert len(models) == 2
    assert models.model(newest) is not a  # dropped, least recently used


def test_forget_drops_the_entry() -> None:
    models = WorkloadModels()
    raw = cached()
    first = models.model(raw)
    models.forget("ns/w")
    assert len(models) == 0
    assert models.model(raw) is not first


def test_a_deleted_workloads_model_is_dropped_by_its_last_reconcile() -> None:
    env = Env()
    for name in ("a", "b"):
        env.workload(name, gpusPerReplica=1)
        env.settle(name)
    assert len(env.rec.models) == 2
    env.delete_workload("a")
    for pod in [p for p in env.pods.list() if p["metadata"]["name"].startswith("a-")]:
        env.pod_gone(pod["metadata"]["name"])
    env.settle("a")
    assert env.get("a") is None and len(env.rec.models) == 2
    env.reconcile("a")  # woken by its delete event: finds it gone
    assert len(env.rec.models) == 1


def test_the_reconciles_leave_the_models_as_they_were_made() -> None:
    """Every model a reconcile got is still what its object says (validated again,
    with the defaults) after the workload was placed, ran, and was edited."""
    env = Env(nodes=2)
    got: list[tuple[Any, GPUWorkload, Any]] = []
    model = env.rec.models.model

    def recording(raw: Any, variant: Any = None) -> GPUWorkload:
        w = model(raw, variant)
        got.append((thaw(raw), w, variant))
        return w
    env.rec.models.model = recording  # type: ignore[method-assign]
    env.workload("g", replicas=2, gpusPerReplica=1)
    env.settle("g")
    for i in range(2):
        env.set_phase(f"g-{i}", "Running")
        env.settle("g")
    env.edit("g", lambda o: o["metadata"].update(generation=2) or
             o["spec"].update(modelName="llama"))
    env.settle("g")
    assert len(got) >= 4 and env.rec.models.spec_hits > 0
    for raw, w, _variant in got:
        fresh = GPUWorkload.model_validate(raw)
        env.rec._defaults(fresh.spec)
        assert w.model_dump() == fresh.model_dump()
