"""An informer's event handlers: one that raises loses the event, so it is counted
(``informer_handler_errors_total{informer,handler}``), logged with the object, and
handed to the handler's ``on_error``; the events after it are delivered. An inline
handler is called on the delivering thread, before the delivery returns, and a slow
threaded handler beside it holds it up in nothing."""

from __future__ import annotations

import threading
from typing import Any

import pytest

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


@pytest.mark.parametrize("inline", [False, True], ids=["threaded", "inline"])
def test_a_raising_handler_is_counted_told_and_the_next_events_still_come(inline: bool) -> None:
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
                                      on_error=on_error, inline=inline))
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


def handler_threads() -> int:
    return sum(t.name.startswith("handler-") for t in threading.enumerate())


def test_an_inline_handler_has_the_event_when_the_delivery_returns_and_no_thread() -> None:
    inf = SharedIndexInformer(client=None, api_version="v1", kind="ConfigMap")  # type: ignore[arg-type]
    threads_before = handler_threads()
    seen: list[tuple[str, str, str]] = []

    def record(op: str) -> Any:
        return lambda *objs: seen.append((op, objs[-1]["metadata"]["name"],
                                          threading.current_thread().name))
    reg = inf.add_event_handler(FuncHandler(record("add"), record("update"), record("delete"),
                                            inline=True))
    assert handler_threads() == threads_before
    inf.replace([cm("a")], "1")
    assert reg.has_synced()
    here = threading.current_thread().name
    assert seen == [("add", "a", here)]
    inf.watch_event("MODIFIED", cm("a", "2"))
    inf.watch_event("DELETED", cm("a", "3"))
    assert seen[1:] == [("update", "a", here), ("delete", "a", here)]
    inf.stop()


def test_a_slow_threaded_handler_does_not_hold_up_an_inline_one() -> None:
    inf = SharedIndexInformer(client=None, api_version="v1", kind="ConfigMap")  # type: ignore[arg-type]
    gate = threading.Event()
    slow: list[str] = []
    fast: list[str] = []

    def busy(obj: Any) -> None:
        gate.wait(5)
        slow.append(obj["metadata"]["name"])

    inf.add_event_handler(FuncHandler(busy))
    inf.add_event_handler(FuncHandler(lambda o: fast.append(o["metadata"]["name"]),
                                      inline=True))
    inf.replace([], "1")
    for i in range(5):
        inf.watch_event("ADDED", cm(f"c{i}"))
    assert fast == [f"c{i}" for i in range(5)]
    assert slow == []
    gate.set()
    eventually(lambda: slow == fast, timeout=5, what="the slow handler catching up")
    inf.stop()
