"""Controller, handlers and predicates without a server: events are fed to the informer
the way its reflector would."""

from __future__ import annotations

import threading
import time

import structlog.testing

from runtime.controller import Controller, Result, TerminalError
from runtime.errors import Forbidden
from runtime.handler import Request, enqueue_object, enqueue_owner
from runtime.informer import SharedIndexInformer
from runtime.predicates import GenerationChangedPredicate, LabelChangedPredicate, or_
from runtime.ratelimiter import ItemExponentialFailureRateLimiter
from runtime.store import DeletedFinalStateUnknown
from tests.waiting import eventually


def obj(
    name: str, gen: int = 1, rv: str = "1", labels: dict | None = None, owner: str | None = None
) -> dict:
    md: dict = {"name": name, "namespace": "ns", "generation": gen, "resourceVersion": rv}
    if labels:
        md["labels"] = labels
    if owner:
        md["ownerReferences"] = [
            {
                "apiVersion": "example.com/v1",
                "kind": "Parent",
                "name": owner,
                "uid": "u",
                "controller": True,
            }
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md}


def informer() -> SharedIndexInformer:
    return SharedIndexInformer(client=None, api_version="v1", kind="ConfigMap")  # type: ignore[arg-type]


def test_reconcile_outcomes_and_predicates() -> None:
    calls: list[str] = []
    fail_once = {"err": 1, "term": 1}
    lock = threading.Lock()

    def reconcile(req: Request) -> Result | None:
        with lock:
            calls.append(req.name)
        if req.name == "err" and fail_once["err"]:
            fail_once["err"] -= 1
            raise RuntimeError("boom")
        if req.name == "term":
            raise TerminalError("bad spec")
        if req.name == "later" and calls.count("later") == 1:
            return Result(requeue_after=0.05)
        return None

    inf = informer()
    ctrl = Controller(
        "test-ctrl",
        reconcile,
        max_concurrent_reconciles=2,
        rate_limiter=ItemExponentialFailureRateLimiter(0.01, 0.1),
    )
    ctrl.watch(inf, enqueue_object, [or_(GenerationChangedPredicate(), LabelChangedPredicate())])
    inf.replace([obj("ok"), obj("err"), obj("term"), obj("later")], "10")
    ctrl.start()
    eventually(lambda: calls.count("err") == 2 and calls.count("later") == 2, timeout=5)
    time.sleep(0.2)
    assert calls.count("term") == 1  # terminal: never retried
    assert calls.count("ok") == 1
    # status-only update (same generation, same labels) is filtered
    inf.watch_event("MODIFIED", obj("ok", gen=1, rv="11"))
    inf.watch_event("MODIFIED", obj("ok", gen=1, rv="12", labels={"a": "b"}))
    eventually(lambda: calls.count("ok") == 2, timeout=5)
    time.sleep(0.1)
    assert calls.count("ok") == 2
    assert ctrl.stop(timeout=5)


def test_owner_mapping_and_tombstones() -> None:
    got: list[Request] = []
    inf = informer()
    ctrl = Controller("owner-ctrl", lambda r: got.append(r))
    ctrl.watch(inf, enqueue_owner("example.com/v1", "Parent"))
    inf.replace([obj("child-a", owner="p1"), obj("orphan")], "1")
    ctrl.start()
    eventually(lambda: Request("ns", "p1") in got, timeout=5)
    # the child vanished while the watch was down: a relist delivers a tombstone
    deleted: list = []
    from runtime.informer import FuncHandler

    inf.add_event_handler(FuncHandler(on_delete=deleted.append))
    got.clear()
    inf.replace([obj("orphan")], "2")
    eventually(lambda: deleted and isinstance(deleted[0], DeletedFinalStateUnknown), timeout=5)
    eventually(lambda: Request("ns", "p1") in got, timeout=5)
    assert ctrl.stop(timeout=5)


def test_late_handler_gets_existing_objects_and_sync() -> None:
    inf = informer()
    inf.replace([obj("a"), obj("b")], "1")
    seen: list[str] = []
    from runtime.informer import FuncHandler

    reg = inf.add_event_handler(FuncHandler(on_add=lambda o: seen.append(o["metadata"]["name"])))
    assert reg.wait_for_sync(5)
    assert sorted(seen) == ["a", "b"]
    assert inf.has_synced()


def test_a_failed_reconcile_is_logged_with_its_traceback_only_when_it_is_a_bug() -> None:
    # an API server's refusal (a 403 in a namespace being deleted) says what went
    # wrong in its message; a traceback is for an error of the reconciler's own
    def reconcile(req: Request) -> Result | None:
        if req.name == "refused":
            raise Forbidden("pods is forbidden: the namespace is being terminated")
        raise KeyError("spec")

    ctrl = Controller("log-ctrl", reconcile)
    with structlog.testing.capture_logs() as logs:
        ctrl._reconcile_handler(Request("ns", "refused"))
        ctrl._reconcile_handler(Request("ns", "bug"))
    errors = {e["name"]: e for e in logs if e["event"] == "controller.reconcile_error"}
    assert errors["refused"]["exc_info"] is False
    assert "being terminated" in errors["refused"]["error"]
    assert errors["bug"]["exc_info"] is True and errors["bug"]["error_type"] == "KeyError"
