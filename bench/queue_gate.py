"""In-process micro-benchmark of the queue gate: the cost of one ``decide`` of a
workload that waits in its GPUQueue (no server).

    python -m bench.queue_gate                       # 30 queues, 1,000 waiting
    python -m bench.queue_gate --queues 100 --waiting 5000

``--queues`` GPUQueues in cohorts of 5, each selecting its own namespace, on as many
nodes of 8 GPUs; each queue holds its nominal 8 (one 8-GPU workload booked), then
``--waiting`` 4-GPU workloads spread over the queues are refused for quota and
stand in their queues' lines. Timed: ``decide`` of each waiting workload again
(every one refused again, so every repetition sees the same state), with the
queue gate and, for the scheduling pass alone, without it (``queues=None``). Also
counted: the informers' ``list`` calls during the timed decisions. The caches are
informers fed by ``watch_event`` (the gate reads what their handlers keep); the
same script runs on a build whose gate read the caches at each decision, which
is how bench/README.md's before/after was taken.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import time
from typing import Any

from api.v1alpha1.types import API_VERSION, DeviceExposure, GPUWorkload
from controllers.placement.state import PlacementState
from controllers.queues.book import QueueBook
from runtime.informer import SharedIndexInformer


def _informer(kind: str) -> SharedIndexInformer:
    inf = SharedIndexInformer(client=None, api_version="v1", kind=kind)  # type: ignore[arg-type]
    calls = [0]
    real = inf.indexer.list

    def counted() -> list[Any]:
        calls[0] += 1
        return real()

    inf.indexer.list = counted  # type: ignore[method-assign]
    inf.list_calls = calls  # type: ignore[attr-defined]
    return inf


def _node(name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def _workload(ns: str, name: str, n: int, gpus: int, priority: int) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}",
                         "resourceVersion": str(n),
                         "creationTimestamp": f"2026-01-01T{n // 3600 % 24:02d}:"
                                              f"{n // 60 % 60:02d}:{n % 60:02d}Z"},
            "spec": {"gpusPerReplica": gpus, "priority": priority}}


def _book(queues: Any, namespaces: Any, workloads: Any) -> QueueBook:
    if importlib.util.find_spec("controllers.queues.manager") is not None:
        return QueueBook(queues, namespaces, workloads)  # its manager follows the informers
    return QueueBook(queues.indexer, namespaces.indexer, workloads.indexer)  # read them


def run(n_queues: int, n_waiting: int, seed: int = 1) -> dict[str, float]:
    rng = random.Random(seed)
    queues, namespaces, workloads = (_informer(k) for k in ("GPUQueue", "Namespace",
                                                             "GPUWorkload"))
    book = _book(queues, namespaces, workloads)  # before the events, as in the manager
    for i in range(n_queues):
        queues.watch_event("ADDED", {
            "apiVersion": API_VERSION, "kind": "GPUQueue",
            "metadata": {"name": f"q{i:03d}", "uid": f"uid-q{i}", "generation": 1},
            "spec": {"nominalGPUs": 8, "cohort": f"c{i // 5}", "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": f"ns-{i:03d}"}}}})
        namespaces.watch_event("ADDED", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": f"ns-{i:03d}",
                                                      "resourceVersion": str(i + 1)}})
    nodes = [_node(f"node{i:03d}", 8) for i in range(n_queues)]
    states = {}
    for gated in (True, False):
        s = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, rng=random.Random(seed),
                           queues=book if gated else None)
        s.rebuild(lambda: (nodes, [], [], []))
        states[gated] = s
    n = 0
    for i in range(n_queues):  # each queue holds its 8
        n += 1
        raw = _workload(f"ns-{i:03d}", "full", n, 8, 0)
        workloads.watch_event("ADDED", raw)
        for s in states.values():
            assert s.decide(GPUWorkload.model_validate(raw)).ok
    waiting = []
    for j in range(n_waiting):
        n += 1
        raw = _workload(f"ns-{rng.randrange(n_queues):03d}", f"w{j}", n, 4, rng.randrange(3))
        workloads.watch_event("ADDED", raw)
        w = GPUWorkload.model_validate(raw)
        d = states[True].decide(w)
        assert d.wait_reason == "WaitingForQuota", (d.outcome, d.wait_reason, d.message)
        waiting.append(w)
    out: dict[str, float] = {}
    for gated, label in ((True, "gate"), (False, "no_gate")):
        lists = sum(i.list_calls[0] for i in (queues, namespaces, workloads))
        times = []
        for w in waiting:
            t0 = time.perf_counter()
            d = states[gated].decide(w)
            times.append(time.perf_counter() - t0)
            assert not d.ok
        out[f"{label}_mean_us"] = statistics.fmean(times) * 1e6
        out[f"{label}_p99_us"] = sorted(times)[int(len(times) * 0.99)] * 1e6
        out[f"{label}_lists_per_decision"] = (
            sum(i.list_calls[0] for i in (queues, namespaces, workloads)) - lists) / len(times)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.queue_gate", description=__doc__)
    ap.add_argument("--queues", type=int, default=30)
    ap.add_argument("--waiting", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    r = run(args.queues, args.waiting, args.seed)
    print(f"{args.queues} queues, {args.waiting} waiting: decide of a waiting workload "
          f"{r['gate_mean_us']:.0f} us mean, {r['gate_p99_us']:.0f} us p99 "
          f"({r['gate_lists_per_decision']:.1f} informer lists per decision); the "
          f"scheduling pass alone {r['no_gate_mean_us']:.0f} us mean, "
          f"{r['no_gate_p99_us']:.0f} us p99")


if __name__ == "__main__":
    main()
