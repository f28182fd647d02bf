"""The asynchronous status writer against the real API server: the latest status
wins and one write carries it, a reconcile reads its own writes before the cache
does, the finalizer is added once, and a refused write is retried until it lands.

The writer's cache is a plain runtime Indexer fed by the test (what an informer
would hold); every write goes to the local kube-apiserver."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import CHILDREN_FINALIZER
from api.v1alpha1.types import API_VERSION
from controllers.status.writer import StatusWriter
from hack.testenv import ControlPlane
from internal import metrics as m
from runtime import Client, NotFound, RestConfig
from runtime.store import Indexer
from tests.integration.controller.conftest import get_workload, workload
from tests.waiting import eventually


def status(message: str, **more: Any) -> dict[str, Any]:
    return {"phase": "Pending", "message": message, **more}


def value(metric: Any) -> float:
    return metric._value.get()


@pytest.fixture
def created(admin: Client, namespace: str) -> Iterator[dict[str, Any]]:
    obj = admin.create(workload("w", namespace, gpusPerReplica=1,
                                template={"spec": {"containers": [{"name": "c",
                                                                   "image": "busybox"}]}}))
    yield obj
    with contextlib.suppress(NotFound):
        admin.patch(API_VERSION, "GPUWorkload", "w", {"metadata": {"finalizers": None}},
                    namespace=namespace)


def cache_of(*objs: dict[str, Any]) -> Indexer:
    idx = Indexer()
    for o in objs:
        idx.add(o)
    return idx


def test_latest_status_wins_and_one_write_carries_it(
        admin: Client, namespace: str, created: dict[str, Any]) -> None:
    cache = cache_of(created)
    writer = StatusWriter(admin, cache)  # not started: everything waits in its queue
    coalesced, written = value(m.STATUS_COALESCED), value(m.STATUS_WRITES.labels("written"))
    for msg in ("first", "second", "third"):
        writer.submit(created, status(msg))
    # a reconcile now sees what it asked for, although neither API nor cache has it
    assert writer.own_writes.view(cache.get(created))["status"]["message"] == "third"
    assert (get_workload(admin, namespace, "w").get("status") or {}).get("message") != "third"
    writer.start()
    try:
        assert writer.flush(30)
    finally:
        writer.stop()
    assert get_workload(admin, namespace, "w")["status"]["message"] == "third"
    assert value(m.STATUS_COALESCED) - coalesced == 2
    assert value(m.STATUS_WRITES.labels("written")) - written == 1
    # until the cache shows the write, the view still answers from the writer
    assert writer.own_writes.view(cache.get(created))["status"]["message"] == "third"
    cache.add(get_workload(admin, namespace, "w"))
    assert writer.own_writes.view(cache.get(created)) is None


def test_the_finalizer_is_added_once_with_the_first_placed_status(
        admin: Client, namespace: str, created: dict[str, Any]) -> None:
    cache = cache_of(created)
    writer = StatusWriter(admin, cache)
    writer.start()
    try:
        writer.submit(created, status("placed"), finalizer=True)
        assert writer.flush(30)
        first = get_workload(admin, namespace, "w")
        assert first["metadata"]["finalizers"] == [CHILDREN_FINALIZER]
        assert writer.has_finalizer(created)  # the cache still shows none
        writer.submit(created, status("running"), finalizer=True)
        assert writer.flush(30)
    finally:
        writer.stop()
    after = get_workload(admin, namespace, "w")
    assert after["metadata"]["finalizers"] == [CHILDREN_FINALIZER]
    assert after["status"]["message"] == "running"


def test_a_refused_write_is_retried_until_it_lands(
        installed: ControlPlane, admin: Client, namespace: str,
        created: dict[str, Any]) -> None:
    """The writer's identity may not write status at first (RBAC); it keeps the
    status and writes it once a RoleBinding lets it."""
    user = f"status-writer-{namespace}"
    config = RestConfig.from_kubeconfig(str(installed.kubeconfig)).impersonating(
        user, ["system:authenticated"])
    cache = cache_of(created)
    writer = StatusWriter(Client(config), cache)
    errors = value(m.STATUS_WRITES.labels("error"))
    writer.start()
    try:
        writer.submit(created, status("eventually"))
        eventually(lambda: value(m.STATUS_WRITES.labels("error")) - errors >= 2, timeout=30,
                   what="the refused write tried again")
        assert (get_workload(admin, namespace, "w").get("status") or {}).get(
            "message") != "eventually"
        admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                      "metadata": {"name": "status-writer", "namespace": namespace},
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "gpu-orchestrator-manager"},
                      "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": user}]})
        assert writer.flush(60)
    finally:
        writer.stop()
    assert get_workload(admin, namespace, "w")["status"]["message"] == "eventually"


def test_a_status_write_never_lands_on_a_recreated_object_of_the_same_name(
        admin: Client, namespace: str, created: dict[str, Any]) -> None:
    """The object is deleted and created again under its name while the cache
    still holds the old one: the old one's status (its UID the precondition) is
    refused by the API server and dropped, never written onto the new object."""
    cache = cache_of(created)
    admin.delete(API_VERSION, "GPUWorkload", "w", namespace=namespace)
    eventually(lambda: _gone(admin, namespace), timeout=30, what="the old object gone")
    new = admin.create(workload("w", namespace, gpusPerReplica=1,
                                template={"spec": {"containers": [{"name": "c",
                                                                   "image": "busybox"}]}}))
    assert new["metadata"]["uid"] != created["metadata"]["uid"]
    writer = StatusWriter(admin, cache)
    gone = value(m.STATUS_WRITES.labels("gone"))
    writer.start()
    try:
        writer.submit(created, status("the old object's"))
        assert writer.flush(30)
    finally:
        writer.stop()
    assert value(m.STATUS_WRITES.labels("gone")) - gone == 1
    assert (get_workload(admin, namespace, "w").get("status") or {}).get(
        "message") != "the old object's"


def _gone(admin: Client, namespace: str) -> bool:
    try:
        get_workload(admin, namespace, "w")
    except NotFound:
        return True
    return False
