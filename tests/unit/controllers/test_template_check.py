"""The child's dry run: a 400/422 is the template's fault, said in the API server's
words, once per namespace and spec; anything else says nothing about the template."""

from __future__ import annotations

from typing import Any

import pytest

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.gpuworkload.template_check import ChildDryRun
from runtime import ApiError


class DryRunClient:
    def __init__(self, error: ApiError | None) -> None:
        self.error, self.calls = error, []  # type: ignore[var-annotated]

    def create(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        assert dry_run
        self.calls.append(obj)
        if self.error is not None:
            raise self.error
        return obj


def gw(generation: int = 1, name: str = "w", namespace: str = "a",
       **spec: Any) -> tuple[GPUWorkload, dict[str, Any]]:
    raw = {"metadata": {"name": name, "namespace": namespace, "uid": f"u-{name}",
                        "generation": generation}, "spec": spec}
    return GPUWorkload.model_validate(raw), raw


@pytest.mark.parametrize("error, verdict", [
    (None, None),
    (ApiError(422, "Invalid", 'Pod "w-1" is invalid: spec.containers[0].ports[0]'
                              '.containerPort: Invalid value: 700000'),
     'spec.template: the API server refuses its children (Pod w-1): Pod "w-1" is invalid: '
     "spec.containers[0].ports[0].containerPort: Invalid value: 700000"),
    (ApiError(403, "Forbidden", "exceeded quota: pods"), None),  # not the template's
    (ApiError(0, "ConnectionError", "down"), None),
])
def test_what_a_dry_run_says(error: ApiError | None, verdict: str | None) -> None:
    client = DryRunClient(error)
    check = ChildDryRun(client, DeviceExposure.CUDA_VISIBLE_DEVICES).check
    assert check(*gw(replicas=2)) == verdict
    assert client.calls[0]["metadata"]["name"] == "w-1"  # the longest name
    assert check(*gw(replicas=2)) == verdict and len(client.calls) == 1  # remembered
    # another workload of the same spec in the namespace: the same children
    assert check(*gw(name="w2", replicas=2)) == verdict and len(client.calls) == 1
    check(*gw(generation=2, replicas=3))
    assert len(client.calls) == 2  # a new spec is checked again
    check(*gw(namespace="b", replicas=2))
    assert len(client.calls) == 3  # another namespace: its own policies and limits


def test_dra_children_are_not_dry_run() -> None:
    client = DryRunClient(None)
    assert ChildDryRun(client, DeviceExposure.DRA).check(*gw()) is None
    assert client.calls == []
