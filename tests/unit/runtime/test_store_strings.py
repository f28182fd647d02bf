"""Equal strings of cached objects are one ``str`` (``runtime.store.freeze``'s pool):
the JSON decoder makes a new string for every value of every watch event, and at
1,000 nodes with 1,000 units bound they were 7 MiB of the controller's Python
objects. The pool never keeps more than its bound of deleted objects' strings."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson

from runtime import store
from runtime.store import freeze


def wire_pod(i: int) -> bytes:
    """A running pod as the watch brings it: its own name, UID and address, the rest
    as every other pod of its kind has it."""
    return orjson.dumps({
        "metadata": {"name": f"u-{i:05d}-0", "namespace": "burst",
                     "uid": f"{i:08d}-aaaa-bbbb-cccc-{i:012d}",
                     "labels": {"gpu.orchestrator.dev/attempt": "0", "bench": "unit"},
                     "finalizers": ["gpu.orchestrator.dev/children"]},
        "spec": {"nodeName": f"node-{i % 10}",
                 "containers": [{"name": "main", "image": "busybox:1.36",
                                 "args": ["sleep", "infinity"],
                                 "terminationMessagePath": "/dev/termination-log",
                                 "imagePullPolicy": "IfNotPresent"}],
                 "tolerations": [{"key": "node.kubernetes.io/not-ready",
                                  "operator": "Exists", "effect": "NoExecute"}]},
        "status": {"phase": "Running", "podIP": f"198.18.0.{i % 250}",
                   "conditions": [{"type": t, "status": "True",
                                   "lastTransitionTime": "2026-11-28T19:43:17Z"}
                                  for t in ("Initialized", "Ready", "PodScheduled")]},
    })


def test_equal_values_of_two_cached_objects_are_one_string() -> None:
    a, b = (freeze(orjson.loads(wire_pod(i))) for i in (1, 2))
    assert a["status"]["phase"] is b["status"]["phase"]
    assert a["spec"]["containers"][0]["image"] is b["spec"]["containers"][0]["image"]
    assert a["spec"]["containers"][0]["args"][1] is b["spec"]["containers"][0]["args"][1]
    assert a["metadata"]["finalizers"][0] is b["metadata"]["finalizers"][0]
    assert a["status"]["conditions"][1]["lastTransitionTime"] is \
        b["status"]["conditions"][2]["lastTransitionTime"]
    assert a["metadata"]["uid"] != b["metadata"]["uid"]
    assert a == orjson.loads(wire_pod(1)) and b == orjson.loads(wire_pod(2))


def test_the_cache_holds_a_quarter_fewer_bytes_per_pod() -> None:
    """What a user sees as the controller's memory: 1,000 pods cached, against the
    same pods as decoded (``FrozenDict`` and ``FrozenList`` are the size of a dict and
    a list: unshared, frozen pods took as much)."""
    wire = [wire_pod(i) for i in range(1000)]

    def kept(decode: Callable[[bytes], Any]) -> float:
        gc.collect()
        tracemalloc.start()
        try:
            cached = [decode(b) for b in wire]
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(cached) == len(wire)
        return size / len(wire)

    decoded = kept(orjson.loads)
    frozen = kept(lambda b: freeze(orjson.loads(b)))
    assert frozen < 0.75 * decoded, (frozen, decoded)


def test_the_pool_keeps_few_strings_of_deleted_objects() -> None:
    """The strings of objects gone from the cache are not kept past the pool's bound,
    and a long one (a message, a last-applied configuration) is never pooled."""
    long = "x" * (store.POOL_MAX_LEN + 1)
    for i in range(3 * store.POOL_SIZE):
        freeze({"uid": f"uid-{i:09d}", "message": long + str(i)})
    assert len(store._POOL) <= store.POOL_SIZE
    assert not any(len(s) > store.POOL_MAX_LEN for s in store._POOL)
