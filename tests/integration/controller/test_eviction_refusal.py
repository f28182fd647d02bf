"""A PodDisruptionBudget's refusal of an eviction comes back at once, naming the
budget. kube-apiserver answers it with 429 TooManyRequests, the status API priority
and fairness also sends when it throttles; the client retried every 429, so the
refusal came back after its backoffs (about 2 s), and the Event said only "the pod's
disruption budget". A throttled request is still retried (tests/unit/runtime)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import DEVICES_ANNOTATION
from hack.testenv import ControlPlane
from runtime import Client, metrics
from runtime.errors import TooManyRequests
from tests.integration.controller.conftest import NodeGroup, Running
from tests.waiting import eventually

BUDGET = "hold-one"
LABELS = {"app": "held"}


@pytest.fixture(scope="module")
def manager(installed: ControlPlane) -> Iterator[Running]:
    """Our manager with the evictor (``--evict-conflicting-pods``)."""
    run = Running(installed, evict_conflicting_pods=True).start()
    try:
        yield run
    finally:
        run.stop()


def held_pod(admin: Client, namespace: str, node: str, name: str) -> dict[str, Any]:
    """A Running pod on ``node`` under a PodDisruptionBudget minAvailable=1 that the
    disruption controller has counted (a budget not yet counted is refused with
    Retry-After: 10, a different answer)."""
    admin.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                  "metadata": {"name": BUDGET, "namespace": namespace},
                  "spec": {"minAvailable": 1, "selector": {"matchLabels": LABELS}}})
    admin.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "namespace": namespace, "labels": LABELS},
                  "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                           "containers": [{"name": "main", "image": "busybox:1.36"}]}})

    def running() -> dict[str, Any] | None:
        pod = admin.get("v1", "Pod", name, namespace)
        return pod if (pod.get("status") or {}).get("phase") == "Running" else None
    pod = eventually(running, timeout=60, what=f"{name} running")

    def counted() -> bool:
        pdb = admin.get("policy/v1", "PodDisruptionBudget", BUDGET, namespace)
        status = pdb.get("status") or {}
        return (status.get("observedGeneration") == pdb["metadata"]["generation"]
                and status.get("currentHealthy") == 1
                and status.get("disruptionsAllowed") == 0)
    eventually(counted, timeout=60, what=f"{BUDGET} counting {name}")
    return pod


def retries_of_posts() -> float:
    return sum(s.value for m in metrics.rest_client_request_retries_total.collect()
               for s in m.samples
               if s.name.endswith("_total") and s.labels.get("verb") == "POST")


def test_a_budget_refusal_is_raised_at_once_without_a_retry(
        admin: Client, namespace: str, group: NodeGroup) -> None:
    """The Eviction API refuses the pod: the client raises the 429 after one
    request (before: four retries over about 2 s), and the error names the budget."""
    (node,) = group.add(1, gpus=4)
    pod = held_pod(admin, namespace, node, "held")
    retries = retries_of_posts()
    start = time.monotonic()
    with pytest.raises(TooManyRequests) as refused:
        admin.create_subresource(
            "v1", "Pod", "held", "eviction",
            {"apiVersion": "policy/v1", "kind": "Eviction",
             "metadata": {"name": "held", "namespace": namespace},
             "deleteOptions": {"preconditions": {"uid": pod["metadata"]["uid"]}}},
            namespace=namespace, deadline=time.monotonic() + 5.0)
    took = time.monotonic() - start
    assert retries_of_posts() == retries, "the refusal was retried"
    assert took < 1.0, f"the refusal came back after {took:.2f}s"
    assert f"The disruption budget {BUDGET} needs 1 healthy pods" in str(refused.value)
    assert admin.get("v1", "Pod", "held", namespace)["metadata"].get("deletionTimestamp") is None


class EventTimes:
    """When each reason's first Event about ``name`` arrived, from a watch."""

    def __init__(self, admin: Client, namespace: str, name: str) -> None:
        self.seen: dict[str, tuple[float, str]] = {}
        self._stop = threading.Event()
        rv = admin.list("v1", "Event", namespace=namespace)["metadata"]["resourceVersion"]
        self._thread = threading.Thread(target=self._follow, args=(admin, namespace, name, rv),
                                        daemon=True)
        self._thread.start()

    def _follow(self, admin: Client, namespace: str, name: str, rv: str) -> None:
        while not self._stop.is_set():
            for ev in admin.watch("v1", "Event", namespace=namespace, resource_version=rv,
                                  timeout_seconds=5,
                                  field_selector=f"involvedObject.name={name}"):
                obj = ev.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if ev.get("type") == "ADDED":
                    self.seen.setdefault(obj.get("reason", ""),
                                         (time.monotonic(), obj.get("message", "")))
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()


def test_the_evictor_says_the_refusal_at_once_naming_the_budget(
        manager: Running, admin: Client, namespace: str, group: NodeGroup) -> None:
    """A Running pod under the budget gives itself devices (its annotation, set by
    hand): the evictor's ``EvictionFailed`` Event follows its ``UnauthorizedDevices``
    within a second and names the budget; the pod keeps running."""
    (node,) = group.add(1, gpus=4)
    held_pod(admin, namespace, node, "forging")
    times = EventTimes(admin, namespace, "forging")
    try:
        admin.patch("v1", "Pod", "forging",
                    {"metadata": {"annotations": {DEVICES_ANNOTATION: "0,1"}}},
                    namespace=namespace)
        eventually(lambda: {"UnauthorizedDevices", "EvictionFailed"} <= times.seen.keys(),
                   timeout=30, what="the evictor's Events")
    finally:
        times.stop()
    (asked, _), (failed, message) = times.seen["UnauthorizedDevices"], times.seen["EvictionFailed"]
    assert f"The disruption budget {BUDGET} needs 1 healthy pods" in message, message
    assert failed - asked < 1.0, f"the refusal was said {failed - asked:.2f}s after the eviction"
    assert (admin.get("v1", "Pod", "forging", namespace).get("status") or {})["phase"] == "Running"
