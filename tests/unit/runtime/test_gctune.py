"""The collector's settings for the controller process (runtime/gctune.py): a burst's
watch events no longer set off a young-generation pass every few events, and what
startup built is left out of later passes; only a manager told to owns them."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import orjson
import pytest

from runtime import Manager, Options, RestConfig, gctune
from runtime.store import freeze

POD = orjson.dumps({"type": "MODIFIED", "object": {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "u-00001", "namespace": "bench", "uid": "7b1c", "resourceVersion": "1",
                 "labels": {"gpu.orchestrator.dev/workload": "u-00001"},
                 "annotations": {"gpu.orchestrator.dev/devices": "3"},
                 "ownerReferences": [{"apiVersion": "gpu.orchestrator.dev/v1alpha1",
                                      "kind": "GPUWorkload", "name": "u-00001", "uid": "9a",
                                      "controller": True}]},
    "spec": {"nodeName": "n-1", "containers": [{
        "name": "main", "image": "busybox:1.36",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "3"}]}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
    "status": {"phase": "Running", "conditions": [
        {"type": t, "status": "True"} for t in ("Initialized", "Ready", "PodScheduled")]}}})


@pytest.fixture
def collector() -> Iterator[list[int]]:
    """The young-generation passes run meanwhile; the process's settings restored."""
    thresholds = gc.get_threshold()
    passes: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        yield passes
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def _cache_events(n: int) -> list[object]:
    """What an informer keeps of ``n`` watch events: each decoded, then frozen."""
    return [freeze(orjson.loads(POD)["object"]) for _ in range(n)]


def test_a_burst_of_events_runs_few_collections(collector: list[int]) -> None:
    gctune.tune()
    kept = _cache_events(3000)
    # ~100k containers kept: one young pass per 700 of them before (about 150),
    # one per 10,000 now; no full pass over the heap
    assert len(kept) == 3000
    assert collector.count(0) + collector.count(1) <= 15, collector
    assert 2 not in collector


def test_default_thresholds_collect_far_more_often(collector: list[int]) -> None:
    gc.set_threshold(700, 10, 10)  # CPython's defaults: what the controller had
    _cache_events(3000)
    assert len(collector) > 15


def test_settle_leaves_what_exists_out_of_later_passes(collector: list[int]) -> None:
    kept = _cache_events(500)
    gctune.settle()
    assert gc.get_freeze_count() >= len(kept)
    # a full pass after it visits only what was made since: the cache stays frozen
    frozen = gc.get_freeze_count()
    gc.collect()
    assert gc.get_freeze_count() == frozen


@pytest.mark.parametrize("tune_gc", [True, False])
def test_only_a_manager_told_to_changes_the_collector(collector: list[int],
                                                      tune_gc: bool) -> None:
    gc.set_threshold(700, 10, 10)
    mgr = Manager(RestConfig(host="http://127.0.0.1:1", qps=0, burst=0),
                  Options(metrics_bind_address="0", health_probe_bind_address="0",
                          tune_gc=tune_gc, retry_period=60.0))
    done = threading.Event()
    runner = threading.Thread(target=lambda: (mgr.start(), done.set()), daemon=True)
    runner.start()
    assert mgr.servers_started.wait(10)
    # no informer: the caches are synced at once, then the manager waits to be stopped
    for _ in range(100):
        if mgr.cache.has_synced():
            break
        threading.Event().wait(0.05)
    threading.Event().wait(0.2)
    mgr.stop()
    assert done.wait(20)
    if tune_gc:
        assert gc.get_threshold() == gctune.THRESHOLDS
        assert gc.get_freeze_count() > 0
    else:
        assert gc.get_threshold() == (700, 10, 10)
        assert gc.get_freeze_count() == 0


def _pauses(generation: str) -> tuple[float, float]:
    """(passes, seconds) in ``python_gc_pause_seconds`` for ``generation``."""
    from prometheus_client import REGISTRY
    count = REGISTRY.get_sample_value("python_gc_pause_seconds_count",
                                      {"generation": generation}) or 0.0
    total = REGISTRY.get_sample_value("python_gc_pause_seconds_sum",
                                      {"generation": generation}) or 0.0
    return count, total


def test_every_pass_is_timed_by_generation(collector: list[int]) -> None:
    """A latency tail can be held against the collector's passes: each pass's pause
    is in the metric under its generation, from ``tune()`` on."""
    gctune.tune()
    kept = _cache_events(2000)  # a heap worth walking
    before = {g: _pauses(g) for g in ("0", "2")}
    gc.collect(0)
    gc.collect(2)
    gc.collect(2)
    assert len(kept) == 2000
    assert _pauses("0")[0] == before["0"][0] + 1
    assert _pauses("2")[0] == before["2"][0] + 2
    assert _pauses("2")[1] > before["2"][1]


def test_the_pass_timer_is_installed_once(collector: list[int]) -> None:
    gctune.tune()
    gctune.tune()
    before = _pauses("1")[0]
    gc.collect(1)
    assert _pauses("1")[0] == before + 1
