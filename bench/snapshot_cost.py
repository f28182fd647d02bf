"""What a copy of the scheduler's inputs costs beside one scheduling pass.

Issue 33 asks for the scheduling pass on an immutable snapshot outside the placement
lock. Before building it: a cluster of N nodes x 8 GPUs with ``fill`` of its GPUs
booked (``bench.micro.build``), then, timed per repetition (best of rounds, us):

- ``pass``: one ``Scheduler.schedule`` of a one-GPU workload (default strategy);
- ``deepcopy``: ``copy.deepcopy`` of the ledger (its queue counts left out) and the nodes;
- ``full``: a structured copy of what a pass reads (each node's holders, counted
  GPUs, usable set, sharing; the allocations; the free index; the node records);
- ``incremental``: kube-scheduler's way -- the outer maps copied (C-speed dict
  copies, node records shared) and one changed node's records copied deep, the
  steady state when one event touched one node since the last snapshot.

Run: ``.venv/bin/python -m bench.snapshot_cost [nodes ...]`` (default 100 1000).
"""

from __future__ import annotations

import copy
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.micro import _workload, build
from internal.scheduling import Scheduler


def _best_us(fn: Callable[[], Any], reps: int, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e6


def _full(ledger: Any, snap: Any) -> tuple:
    holders = {n: {d: dict(ks) for d, ks in devs.items()} for n, devs in ledger._holders.items()}
    counted = {n: dict(ks) for n, ks in ledger._counted.items()}
    allocs = {k: copy.copy(a) for k, a in ledger._allocs.items()}
    return (holders, counted, dict(ledger._usable), dict(ledger._size), dict(ledger._sharing),
            allocs, dict(ledger.index._free),
            {f: list(b) for f, b in ledger.index._buckets.items()}, dict(snap.nodes))


def _incremental(ledger: Any, snap: Any, node: str) -> tuple:
    holders = dict(ledger._holders)
    holders[node] = {d: dict(ks) for d, ks in ledger._holders.get(node, {}).items()}
    counted = dict(ledger._counted)
    counted[node] = dict(ledger._counted.get(node, {}))
    return (holders, counted, dict(ledger._usable), dict(ledger._allocs), dict(ledger.index._free),
            dict(snap.nodes))


def measure(n: int, gpus: int, fill: float) -> dict:
    """One cluster size: the pass and the three copies, in microseconds."""
    snap, ledger, free = build(n, gpus, fill)
    sched = Scheduler(snap, ledger, rng=random.Random(1))
    w = _workload("probe")
    reps = 200 if n <= 100 else 20
    usage, ledger.usage = ledger.usage, None
    try:
        return {
            "nodes": n, "gpus": gpus, "booked": fill, "allocations": len(ledger._allocs),
            "pass_us": _best_us(lambda: sched.schedule(w), reps),
            "deepcopy_us": _best_us(lambda: copy.deepcopy((ledger, snap.nodes)),
                                    max(2, reps // 20), 3),
            "full_us": _best_us(lambda: _full(ledger, snap), reps),
            "incremental_us": _best_us(lambda: _incremental(ledger, snap, free), reps),
        }
    finally:
        ledger.usage = usage


def run(sizes: list[int], gpus: int = 8, fill: float = 0.9) -> list[dict]:
    rows = []
    for n in sizes:
        row = measure(n, gpus, fill)
        rows.append(row)
        print(f"snapshot_cost: {n:>5} nodes x {gpus} ({fill:.0%} booked,"
              f" {row['allocations']} allocations): pass {row['pass_us']:9.1f} us"
              f"  deepcopy {row['deepcopy_us']:10.1f} us  full {row['full_us']:9.1f} us"
              f"  incremental {row['incremental_us']:8.1f} us", flush=True)
    return rows


if __name__ == "__main__":
    run([int(a) for a in sys.argv[1:]] or [100, 1000])
