"""In-process micro-benchmark: one placement decision per strategy (no server).

Pure ``internal/scheduling``: a Snapshot of N nodes x G GPUs (kwok-shaped Node dicts,
no GPUNode, half the GPUs already booked in the Ledger at random), then
``Scheduler.schedule`` of a one-GPU workload, repeated; the timing is of the
decision only (``decide`` without ``assume``, so every repetition sees the same
cluster). annotationMap gets a map naming one free device.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from api.v1alpha1.types import GPUWorkload
from internal.scheduling import COST_LABEL, Ledger, Scheduler, Snapshot, names
from internal.scheduling.framework import SCHEDULED


def _node(name: str, gpus: int, cost: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, COST_LABEL: cost}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                   "capacity": {"nvidia.com/gpu": str(gpus)},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _workload(name: str, **spec: Any) -> GPUWorkload:
    return GPUWorkload.model_validate(
        {"metadata": {"name": name, "namespace": "bench"}, "spec": {"gpusPerReplica": 1, **spec}})


def build(nodes: int, gpus: int, fill: float, seed: int = 0) -> tuple[Snapshot, Ledger, str]:
    """A cluster with ``fill`` of its GPUs booked (one-GPU workloads); returns it and a
    node with a free device (for annotationMap)."""
    rng = random.Random(seed)
    ledger = Ledger()
    snap = Snapshot.build(
        (_node(f"node-{i:05d}", gpus, rng.choice(["1.0", "2.5", "4.0"])) for i in range(nodes)),
        (), ledger)
    sched = Scheduler(snap, ledger, rng=random.Random(seed))
    for i in range(int(nodes * gpus * fill)):
        w = _workload(f"fill-{i}", schedulingStrategy="random")
        d = sched.schedule(w)
        if d.ok:
            d.assume(ledger, w)
            ledger.commit(w.key)
    free = next(n for n in snap.names if ledger.free_count(n) > 0)
    return snap, ledger, free


def _time(fn: Callable[[], Any], min_reps: int, min_seconds: float) -> list[float]:
    out: list[float] = []
    t_end = time.perf_counter() + min_seconds
    while len(out) < min_reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        if len(out) >= 20 * min_reps:
            break
    return out


def run(sizes: list[int], gpus: int = 8, fill: float = 0.5, reps: int = 200,
        min_seconds: float = 0.5, progress: Callable[[str], None] = print) -> list[dict]:
    results = []
    for n in sizes:
        t0 = time.perf_counter()
        snap, ledger, free_node = build(n, gpus, fill)
        progress(f"micro: {n} nodes x {gpus} GPUs built ({fill:.0%} booked) "
                 f"in {time.perf_counter() - t0:.1f}s")
        sched = Scheduler(snap, ledger, rng=random.Random(1))
        for strat in names():
            spec: dict[str, Any] = {"schedulingStrategy": strat}
            if strat == "annotationMap":
                dev = min(ledger.free_devices(free_node))
                spec["schedulingMap"] = f"0={free_node}:{dev}"
            w = _workload(f"probe-{strat}", **spec)
            d = sched.schedule(w)
            if d.outcome != SCHEDULED:
                raise RuntimeError(f"{strat} at {n} nodes: {d.outcome}: {d.message}")
            samples = _time(lambda w=w, s=sched: s.schedule(w), reps, min_seconds)
            samples.sort()
            row = {
                "strategy": strat, "nodes": n, "gpus_per_node": gpus, "booked": fill,
                "decisions": len(samples),
                "p50_us": round(statistics.median(samples) * 1e6, 1),
                "p99_us": round(samples[int(0.99 * (len(samples) - 1))] * 1e6, 1),
                "mean_us": round(statistics.fmean(samples) * 1e6, 1),
                "visited": d.visited,
            }
            results.append(row)
            progress(f"micro: {strat:>15} @ {n:>5} nodes: p50 {row['p50_us']:>8.1f} us  "
                     f"p99 {row['p99_us']:>8.1f} us  (visited {d.visited} nodes)")
    return results
