"""The child's dry run: a 400/422 is the template's fault, said in the API server's
words, once per namespace and spec; anything else says nothing about the template."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from controllers.gpuworkload.template_check import ChildDryRun
from runtime import ApiError
from tests.waiting import eventually


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


class SlowClient(DryRunClient):
    """A dry run that answers only when the test lets it."""

    def __init__(self, error: ApiError | Exception | None = None) -> None:
        super().__init__(None)
        self.raise_ = error
        self.release = threading.Event()

    def create(self, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        self.calls.append(obj)
        self.release.wait(10)
        if self.raise_ is not None:
            raise self.raise_
        return obj


def _ask_together(check: Any, workers: int) -> tuple[list[threading.Thread], list[Any]]:
    answers: list[Any] = []

    def ask(i: int) -> None:
        try:
            answers.append(check(*gw(name=f"w{i}", replicas=2)))
        except Exception as exc:  # what a worker would see
            answers.append(exc)
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    return threads, answers


def test_workers_asking_together_share_one_dry_run() -> None:
    # a burst's first workloads of one spec reach the 16 workers together
    client = SlowClient(ApiError(422, "Invalid", "bad port"))
    threads, answers = _ask_together(ChildDryRun(client, DeviceExposure.CUDA_VISIBLE_DEVICES)
                                     .check, 16)
    eventually(lambda: len(client.calls) == 1, what="the first dry run sent")
    time.sleep(0.1)  # the others are waiting on it, not sending their own
    client.release.set()
    for t in threads:
        t.join(10)
    assert len(client.calls) == 1
    assert len(answers) == 16 and all("bad port" in a for a in answers)


def test_a_dry_run_that_raised_lets_the_next_worker_try() -> None:
    client = SlowClient(OSError("connection reset"))
    check = ChildDryRun(client, DeviceExposure.CUDA_VISIBLE_DEVICES).check
    threads, answers = _ask_together(check, 2)
    eventually(lambda: len(client.calls) == 1, what="the first dry run sent")
    client.release.set()
    for t in threads:
        t.join(10)
    # each raised (nothing remembered), the second after its own dry run
    assert len(client.calls) == 2 and all(isinstance(a, OSError) for a in answers)
