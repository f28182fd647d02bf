"""Micro-measurements of the controller's per-reconcile costs (a script, not a test;
no server, one process, best of several rounds so that a loaded machine shows less).

    python -m bench.hotpath models      # the reconcile's read of its workload, µs
    python -m bench.hotpath placement   # one placement decision, µs

``models``: ``WorkloadModels.model`` on the objects a workload's reconciles see in
one life: each a new version (a new resourceVersion, another status, the same
spec and generation), as the informer hands them out after our status writes and
the pods' events. A one-GPU workload and an 8-replica gang, each with a pod
template and a status of its size.

``placement``: ``Scheduler.schedule`` (the decision, no booking) of a one-GPU
workload and an 8-replica gang of one GPU each, leastLoaded and bestFit, on the
micro-benchmark's cluster (``bench/micro.py``: 100 nodes x 8 GPUs, half of them
booked at random).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from api.v1alpha1.types import API_VERSION
from bench.micro import _workload, build
from controllers.gpuworkload.models import WorkloadModels
from internal.scheduling import Scheduler
from runtime.store import freeze

TEMPLATE = {"metadata": {"labels": {"app": "train"}},
            "spec": {"containers": [{"name": "main", "image": "registry.local/train:1.4",
                                     "command": ["python", "-m", "train"],
                                     "args": ["--epochs", "10", "--batch", "256"],
                                     "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
                                     "resources": {"limits": {"cpu": "4", "memory": "16Gi"}}}],
                     "restartPolicy": "Never"}}


def workload(replicas: int, rv: int, generation: int = 1, ready: int = 0) -> Any:
    """A cached GPUWorkload as the informer holds it (frozen, no managedFields), at
    ``rv``, Running on its placements (``readyReplicas`` less ``ready``)."""
    placements = [{"index": i, "node": f"node-{i:03d}", "devices": [0]}
                  for i in range(replicas)]
    conds = [{"type": t, "status": "True", "reason": r, "message": m,
              "lastTransitionTime": "2026-01-01T00:00:01Z", "observedGeneration": generation}
             for t, r, m in (("Scheduled", "Placed", f"placed {replicas} replica(s)"),
                             ("Ready", "AllRunning", f"{replicas}/{replicas} running"),
                             ("PlacementTrusted", "Booked", "booked by this controller"))]
    return freeze({
        "apiVersion": API_VERSION, "kind": "GPUWorkload",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "0b7f-uid",
                     "resourceVersion": str(rv), "generation": generation,
                     "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {"team": "a"}, "finalizers": ["gpu.orchestrator.dev/children"],
                     "annotations": {"note": "bench"}},
        "spec": {"replicas": replicas, "gpusPerReplica": 1, "template": TEMPLATE,
                 "retryPolicy": {"maxRetries": 3}},
        "status": {"phase": "Running", "placements": placements, "conditions": conds,
                   "strategy": "leastLoaded", "replicas": replicas,
                   "readyReplicas": replicas - ready,
                   "observedGeneration": generation, "retries": 0,
                   "selector": "gpu.orchestrator.dev/workload=train"},
    })


def best_us(fn: Callable[[int], Any], n: int, rounds: int = 5) -> float:
    """µs per call of ``fn(i)`` for i in range(n), the best of ``rounds`` rounds."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def _read_us(objs: list[Any], n: int) -> float:
    models = WorkloadModels()
    models.model(objs[0])
    return best_us(lambda i: models.model(objs[i % len(objs)]), n)


def bench_models(n: int) -> None:
    for r in (1, 8):
        cases = {
            # a status write: a new version, another status, the same generation
            "new version, other status": [workload(r, 100 + i, ready=i % 2) for i in range(n)],
            # the status we asked for (the writer's view), then written back
            "new version, equal status": [workload(r, 100 + i) for i in range(n)],
            # an edit: every version a new generation
            "new generation": [workload(r, 100 + i, generation=1 + i) for i in range(n)],
            "the same object": [workload(r, 100)],
        }
        for what, objs in cases.items():
            print(f"models replicas={r}: {_read_us(objs, n):5.1f} µs per read, {what}")


def bench_placement(n: int) -> None:
    snap, ledger, _ = build(100, 8, 0.5)
    sched = Scheduler(snap, ledger, rng=random.Random(1))
    for strategy in ("leastLoaded", "bestFit"):
        for replicas in (1, 8):
            w = _workload("w", schedulingStrategy=strategy, replicas=replicas)
            assert sched.schedule(w).ok
            us = best_us(lambda i, w=w: sched.schedule(w), max(1, n // 20))
            print(f"placement {strategy} replicas={replicas}: {us:7.1f} µs per decision")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["models", "placement"])
    p.add_argument("-n", type=int, default=2000, help="calls per round")
    args = p.parse_args(argv)
    {"models": bench_models, "placement": bench_placement}[args.what](args.n)


if __name__ == "__main__":
    main()
