"""Informers against the real API server: order of events, API server restart, 410 relist."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from runtime import errors
from runtime.client import Client
from runtime.informer import FuncHandler, SharedIndexInformer
from runtime.store import DeletedFinalStateUnknown, thaw
from tests.integration.runtime.conftest import configmap
from tests.waiting import eventually


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()

    def handler(self) -> FuncHandler:
        return FuncHandler(
            on_add=lambda o: self._rec("add", o),
            on_update=lambda old, new: self._rec("update", new),
            on_delete=self._rec_delete,
        )

    def _rec(self, op: str, o: dict) -> None:
        with self.lock:
            self.events.append((op, o["metadata"]["name"], (o.get("data") or {}).get("v")))

    def _rec_delete(self, o: Any) -> None:
        tomb = isinstance(o, DeletedFinalStateUnknown)
        obj = o.obj if tomb else o
        with self.lock:
            self.events.append(("tombstone" if tomb else "delete", obj["metadata"]["name"], None))

    def of(self, name: str) -> list[tuple[str, Any]]:
        with self.lock:
            return [(op, v) for op, n, v in self.events if n == name]


@pytest.fixture
def informer(client: Client, namespace: str):  # type: ignore[no-untyped-def]
    inf = SharedIndexInformer(client, "v1", "ConfigMap", namespace=namespace, watch_timeout=(5, 10))
    rec = Recorder()
    inf.add_event_handler(rec.handler())
    inf.start()
    assert inf.wait_for_sync(30)
    yield inf, rec
    inf.stop()


def test_sees_create_update_delete_in_order(client: Client, namespace: str, informer) -> None:  # type: ignore[no-untyped-def]
    inf, rec = informer
    client.create(configmap(namespace, "c1", "v1"))
    cur = client.get("v1", "ConfigMap", "c1", namespace)
    cur["data"]["v"] = "v2"
    client.update(cur)
    client.patch("v1", "ConfigMap", "c1", {"data": {"v": "v3"}}, namespace)
    client.delete("v1", "ConfigMap", "c1", namespace)
    eventually(lambda: rec.of("c1")[-1:] == [("delete", None)], timeout=15)
    assert rec.of("c1") == [("add", "v1"), ("update", "v2"), ("update", "v3"), ("delete", None)]
    assert inf.indexer.get_by_name("c1", namespace) is None
    with pytest.raises(errors.NotFound) as ei:
        client.get("v1", "ConfigMap", "c1", namespace)
    assert "c1" in ei.value.message


def test_client_typed_errors_and_apply(client: Client, namespace: str) -> None:
    client.create(configmap(namespace, "e1", "v1"))
    with pytest.raises(errors.AlreadyExists):
        client.create(configmap(namespace, "e1", "v1"))
    stale = client.get("v1", "ConfigMap", "e1", namespace)
    client.patch("v1", "ConfigMap", "e1", {"data": {"v": "v2"}}, namespace)
    with pytest.raises(errors.Conflict):
        client.update(thaw(stale))
    with pytest.raises(errors.Invalid):
        client.create(configmap(namespace, "Bad_Name", "x"))
    applied = client.apply(configmap(namespace, "e2", "ssa"), field_manager="runtime-test")
    assert applied["data"] == {"v": "ssa"}
    jp = client.patch(
        "v1",
        "ConfigMap",
        "e2",
        [{"op": "replace", "path": "/data/v", "value": "j"}],
        namespace,
        patch_type="json",
    )
    assert jp["data"]["v"] == "j"
    sa = client.impersonate("system:serviceaccount:default:nobody")
    with pytest.raises(errors.Forbidden):
        sa.list("v1", "ConfigMap", namespace)
    page = client.list("v1", "ConfigMap", namespace, limit=1)
    assert len(page["items"]) == 1 and page["metadata"].get("continue")
    assert len(client.list_all("v1", "ConfigMap", namespace, page_size=1)["items"]) >= 2


def test_watch_resumes_after_apiserver_restart(
    cluster, client: Client, namespace: str, informer
) -> None:  # type: ignore[no-untyped-def]
    inf, rec = informer
    client.create(configmap(namespace, "r1", "v1"))
    eventually(lambda: rec.of("r1") == [("add", "v1")], timeout=15)
    cluster.restart_apiserver()
    client.patch("v1", "ConfigMap", "r1", {"data": {"v": "v2"}}, namespace)
    client.patch("v1", "ConfigMap", "r1", {"data": {"v": "v3"}}, namespace)
    # handlers run on their own thread after the store is updated: wait for what the
    # handler saw (the store held it before)
    eventually(
        lambda: rec.of("r1")[-1:] == [("update", "v3")],
        timeout=60,
        what="the handler saw v3 after the restart",
    )
    assert (inf.indexer.get_by_name("r1", namespace) or {}).get("data") == {"v": "v3"}
    values = [v for op, v in rec.of("r1")]
    assert values[0] == "v1" and values[-1] == "v3"
    assert values == sorted(values)  # never goes back in time


def test_410_gone_relists_and_loses_nothing(
    cluster, client: Client, namespace: str, informer
) -> None:  # type: ignore[no-untyped-def]
    inf, rec = informer
    refl = inf.reflector
    client.create(configmap(namespace, "keep", "v1"))
    client.create(configmap(namespace, "gone", "v1"))
    eventually(lambda: rec.of("keep") and rec.of("gone"), timeout=15)
    lists_before = refl.lists

    # Hold the reflector's next watch until the history it would resume from is gone.
    gate = threading.Event()
    real_watch = client.watch

    def gated_watch(*a: Any, **kw: Any) -> Any:
        gate.wait(60)
        return real_watch(*a, **kw)

    refl.client = type("Gated", (), {"watch": staticmethod(gated_watch), "list": client.list})()
    refl.break_watch()
    client.patch("v1", "ConfigMap", "keep", {"data": {"v": "v2"}}, namespace)
    client.create(configmap(namespace, "new", "v1"))
    client.delete("v1", "ConfigMap", "gone", namespace)
    cluster.compact_etcd()
    cluster.restart_apiserver()  # its watch cache now starts after our old resourceVersion
    gate.set()

    eventually(lambda: ("tombstone", None) in rec.of("gone"), timeout=60, what="tombstone")
    eventually(lambda: rec.of("new") == [("add", "v1")], timeout=10)
    eventually(lambda: rec.of("keep")[-1] == ("update", "v2"), timeout=10)
    assert refl.lists > lists_before
    names = sorted(o["metadata"]["name"] for o in inf.indexer.list())
    assert names == ["keep", "new"]
