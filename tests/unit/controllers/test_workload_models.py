"""The reconcile's typed workload, validated once per cached version: the same cached
object gives the same model, a read-your-writes view (another status) or other
defaults give their own, and an invalid spec is refused every time."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from api.v1alpha1.types import API_VERSION, GPUWorkload
from controllers.gpuworkload.models import WorkloadModels
from runtime.store import freeze


def cached(rv: str = "7", uid: str = "u1", **spec: Any) -> Any:
    return freeze({"apiVersion": API_VERSION, "kind": "GPUWorkload",
                   "metadata": {"name": "w", "namespace": "ns", "uid": uid,
                                "resourceVersion": rv},
                   "spec": {"gpusPerReplica": 1, **spec}, "status": {"phase": "Pending"}})


def test_the_same_cached_version_is_validated_once() -> None:
    prepared: list[GPUWorkload] = []
    models = WorkloadModels(prepared.append)
    raw = cached()
    first = models.model(raw)
    assert models.model(raw) is first
    assert prepared == [first]
    newer = cached(rv="8")
    assert models.model(newer) is not first


def test_a_view_with_the_status_we_asked_for_gets_its_own_model() -> None:
    models = WorkloadModels()
    raw = cached()
    assert models.model(raw).status.phase == "Pending"
    view = {**raw, "status": {"phase": "Scheduled"}}  # same version, our status
    assert models.model(view).status.phase == "Scheduled"
    assert models.model(raw).status.phase == "Pending"


def test_other_defaults_prepare_it_again() -> None:
    seen: list[str] = []
    models = WorkloadModels(lambda w: seen.append("prepared"))
    raw = cached()
    models.model(raw, ("leastLoaded",))
    models.model(raw, ("bestFit",))
    models.model(raw, ("bestFit",))
    assert seen == ["prepared", "prepared"]


def test_an_invalid_spec_is_refused_every_time() -> None:
    models = WorkloadModels()
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
        models.model(cached(rv="1", uid=f"other-{i}"))
    assert models.model(newest) is not a  # dropped, least recently used
