"""The asynchronous status writer against the real API server: the latest status
wins and one write carries it, a reconcile reads its own writes before the cache
does, the finalizer is added once, and a write the API server refuses for good
(422, 403) is sent once and reported, not resent for ever.

The writer's cache is a plain runtime Indexer fed by the test (what an informer
would hold); every write goes to the local kube-apiserver."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from api.v1alpha1.keys import CHILDREN_FINALIZER
from api.v1alpha1.types import API_VERSION
from controllers.status.writer import StatusWriter
from hack.testenv import ControlPlane
from internal import metrics as m
from runtime import Client, NotFound, RestConfig
from runtime.events import EventRecorder
from runtime.store import Indexer
from tests.integration.controller.conftest import get_workload, wait_events, workload
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


def refused_events(admin: Client, namespace: str) -> list[dict[str, Any]]:
    return [e for e in wait_events(admin, namespace, "w", "StatusRefused")
            if e["reason"] == "StatusRefused"]


def not_resent(writer: StatusWriter, errors: float, seconds: float = 3.0) -> None:
    """Nothing of the refused write is queued, and no retry goes out for
    ``seconds`` (retries went 0.2, 0.4, 0.8, 1.6 s apart, then every 10 s)."""
    assert writer.queued() == 0
    time.sleep(seconds)
    assert value(m.STATUS_WRITES.labels("error")) == errors


def test_a_status_the_api_server_refuses_is_sent_once_and_reported(
        admin: Client, namespace: str, created: dict[str, Any]) -> None:
    """A status the CRD's schema refuses (422: a phase that is no phase) gets the
    same answer every time: it was resent every 10 s at most, for ever, and
    reported nowhere but the manager's log. Now: one write, a StatusRefused Warning
    Event on the workload with the code and the API server's message, a count, and
    the reconciler no longer takes that status for written."""
    cache = cache_of(created)
    writer = StatusWriter(admin, cache)  # its Events on its own client
    dropped = value(m.STATUS_DROPPED.labels("Invalid"))
    errors = value(m.STATUS_WRITES.labels("error"))
    writer.start()
    try:
        writer.submit(created, status("placing", phase="Placing"))
        [event] = refused_events(admin, namespace)
        assert event["type"] == "Warning"
        assert event["involvedObject"]["uid"] == created["metadata"]["uid"]
        assert "422 Invalid" in event["message"]
        assert 'Unsupported value: "Placing"' in event["message"]  # the API server's words
        assert value(m.STATUS_DROPPED.labels("Invalid")) - dropped == 1
        not_resent(writer, errors)
        assert writer.own_writes.view(cache.get(created)) is None
        assert not writer.own_writes.is_behind(cache.get(created))
        assert (get_workload(admin, namespace, "w").get("status") or {}).get(
            "message") != "placing"
        # the next reconcile's status, one the API server takes, lands
        writer.submit(created, status("0/4 nodes are available"))
        assert writer.flush(30)
    finally:
        writer.stop()
    assert get_workload(admin, namespace, "w")["status"]["message"] == \
        "0/4 nodes are available"
    assert len(refused_events(admin, namespace)) == 1


def test_a_write_rbac_forbids_is_reported_and_written_again_once_allowed(
        installed: ControlPlane, admin: Client, namespace: str,
        created: dict[str, Any]) -> None:
    """The writer's identity may not write status (RBAC, 403): the write is sent
    once and reported on the workload; once a RoleBinding lets it, the status the
    next reconcile asks for lands."""
    user = f"status-writer-{namespace}"
    config = RestConfig.from_kubeconfig(str(installed.kubeconfig)).impersonating(
        user, ["system:authenticated"])
    cache = cache_of(created)
    writer = StatusWriter(Client(config), cache,
                          recorder=EventRecorder(admin, "gpu-orchestrator"))
    dropped = value(m.STATUS_DROPPED.labels("Forbidden"))
    errors = value(m.STATUS_WRITES.labels("error"))
    writer.start()
    try:
        writer.submit(created, status("eventually"))
        [event] = refused_events(admin, namespace)
        assert "403 Forbidden" in event["message"] and user in event["message"]
        assert value(m.STATUS_DROPPED.labels("Forbidden")) - dropped == 1
        not_resent(writer, errors)
        assert (get_workload(admin, namespace, "w").get("status") or {}).get(
            "message") != "eventually"
        admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                      "metadata": {"name": "status-writer", "namespace": namespace},
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "gpu-orchestrator-manager"},
                      "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": user}]})
        # RBAC takes a moment to reach the authorizer: the next reconciles write again
        def landed() -> bool:
            writer.submit(created, status("eventually"))
            assert writer.flush(30)
            return (get_workload(admin, namespace, "w").get("status") or {}).get(
                "message") == "eventually"
        eventually(landed, timeout=30, what="the status written once RBAC lets it")
    finally:
        writer.stop()


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
