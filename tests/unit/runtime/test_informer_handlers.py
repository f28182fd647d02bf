"""An informer's event handler that raises: the event is lost, so it is counted
(``informer_handler_errors_total{informer,handler}``), logged with the object, and
handed to the handler's ``on_error``; the events after it are delivered."""

from __future__ import annotations

import threading
from typing import Any

from runtime import metrics
from runtime.informer import FuncHandler, SharedIndexInformer
from runtime.store import DeletedFinalStateUnknown
from tests.waiting import eventually


def cm(name: str, rv: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


def errors(informer: str, handler: str) -> float:
    value = metrics.registry.get_sample_value(
        "informer_handler_errors_total", {"informer": informer, "handler": handler})
    return value or 0.0


def test_a_raising_handler_is_counted_told_and_the_next_events_still_come() -> None:
    inf = SharedIndexInformer(client=None, api_version="v1", kind="ConfigMap")  # type: ignore[arg-type]
    seen: list[str] = []
    failed: list[tuple[str, str, str]] = []
    done = threading.Event()

    def on_add(obj: Any) -> None:
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("a bug in the handler")
        seen.append(obj["metadata"]["name"])

    def on_delete(obj: Any) -> None:
        raise KeyError("also on delete")

    def on_error(op: str, obj: Any, exc: BaseException) -> None:
        key = obj.key if isinstance(obj, DeletedFinalStateUnknown) else obj["metadata"]["name"]
        failed.append((op, key, type(exc).__name__))
        if len(failed) == 2:
            done.set()

    before = errors("v1/ConfigMap", "cache")
    inf.add_event_handler(FuncHandler(on_add, None, on_delete, name="cache",
                                      on_error=on_error))
    inf.replace([cm("good"), cm("bad"), cm("after")], "10")
    inf.replace([cm("good"), cm("after")], "11")  # bad is gone: a tombstone
    assert done.wait(5)
    eventually(lambda: seen == ["good", "after"], timeout=5, what="the events after it")
    assert failed == [("add", "bad", "RuntimeError"), ("delete", "ns/bad", "KeyError")]
    assert errors("v1/ConfigMap", "cache") - before == 2
    inf.stop()


def test_a_raising_error_hook_does_not_stop_the_handler() -> None:
    inf = SharedIndexInformer(client=None, api_version="v1", kind="ConfigMap")  # type: ignore[arg-type]
    seen: list[str] = []

    def on_add(obj: Any) -> None:
        if obj["metadata"]["name"] == "bad":
            raise RuntimeError("bug")
        seen.append(obj["metadata"]["name"])

    def on_error(op: str, obj: Any, exc: BaseException) -> None:
        raise RuntimeError("the hook fails too")

    before = errors("v1/ConfigMap", "FuncHandler")
    inf.add_event_handler(FuncHandler(on_add, on_error=on_error))
    inf.replace([cm("bad"), cm("after")], "10")
    eventually(lambda: seen == ["after"], timeout=5, what="the event after it")
    assert errors("v1/ConfigMap", "FuncHandler") - before == 1
    inf.stop()


def test_events_pushed_while_the_handler_is_busy_all_come_in_order() -> None:
    from runtime.informer import HandlerRegistration
    gate, seen = threading.Event(), []

    def on_add(obj: dict[str, Any]) -> None:
        gate.wait(5)  # busy with the first: the rest pile up behind it, nobody woken
        seen.append(obj["metadata"]["name"])

    reg = HandlerRegistration(FuncHandler(on_add), "v1/ConfigMap")
    for i in range(20):
        reg.push("add", cm(f"c{i}"))
    gate.set()
    eventually(lambda: len(seen) == 20, timeout=5, what="every event handled")
    assert seen == [f"c{i}" for i in range(20)]
    reg.push("add", cm("after"))  # onto an empty buffer again: wakes the waiting handler
    eventually(lambda: seen[-1] == "after", timeout=5, what="the next event handled")
    reg.stop()
