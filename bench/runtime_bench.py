"""Micro-benchmarks of the runtime framework (a script, not a test).

    python bench/runtime_bench.py queue                 # work queue add/get/done per second
    python bench/runtime_bench.py informer [--kubeconfig PATH] [--count 10000]

``informer`` creates ``--count`` ConfigMaps in a fresh namespace, times an informer's
initial list + sync of them, then deletes the namespace. Without ``--kubeconfig`` it starts
its own local control plane (hack/testenv). Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.client import Client, RestConfig
from runtime.informer import SharedIndexInformer
from runtime.workqueue import WorkQueue


def emit(**kw: object) -> None:
    print(orjson.dumps(kw).decode(), flush=True)


def bench_queue(n: int, workers: int, keys: int) -> None:
    # single thread: add, get, done in lockstep
    q = WorkQueue(name="")
    t0 = time.perf_counter()
    for i in range(n):
        q.add(i)
        item, _ = q.get()
        q.done(item)
    dt = time.perf_counter() - t0
    emit(bench="queue_serial", ops=n, seconds=round(dt, 3), items_per_s=round(n / dt))

    # producer + N workers, with metrics on, dedup across `keys` distinct keys
    q = WorkQueue(name="bench")
    processed = [0] * workers

    def work(i: int) -> None:
        while True:
            item, shut = q.get()
            if shut:
                return
            processed[i] += 1
            q.done(item)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    for i in range(n):
        q.add(i % keys)
    q.shut_down_with_drain()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    emit(
        bench="queue_concurrent",
        adds=n,
        workers=workers,
        distinct_keys=keys,
        processed=sum(processed),
        seconds=round(dt, 3),
        adds_per_s=round(n / dt),
        processed_per_s=round(sum(processed) / dt),
    )


def bench_informer(client: Client, count: int) -> None:
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        t0 = time.perf_counter()

        def mk(i: int) -> None:
            client.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{i:05d}", "namespace": ns, "labels": {"bench": "1"}},
                    "data": {"k": "v" * 64, "i": str(i)},
                }
            )

        with ThreadPoolExecutor(16) as ex:
            list(ex.map(mk, range(count)))
        emit(bench="create_configmaps", count=count, seconds=round(time.perf_counter() - t0, 2))

        for page_size in (500,):
            inf = SharedIndexInformer(client, "v1", "ConfigMap", namespace=ns, page_size=page_size)
            t0 = time.perf_counter()
            inf.start()
            assert inf.wait_for_sync(600)
            dt = time.perf_counter() - t0
            emit(
                bench="informer_initial_sync",
                objects=len(inf.indexer),
                page_size=page_size,
                seconds=round(dt, 3),
                objects_per_s=round(len(inf.indexer) / dt),
            )
            inf.stop()
    finally:
        client.request("DELETE", f"/api/v1/namespaces/{ns}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["queue", "informer", "all"])
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--kubeconfig")
    a = ap.parse_args()
    if a.what in ("queue", "all"):
        bench_queue(a.ops, a.workers, a.keys)
    if a.what in ("informer", "all"):
        if a.kubeconfig:
            client = Client(RestConfig.from_kubeconfig(a.kubeconfig, qps=2000, burst=2000))
            bench_informer(client, a.count)
        else:
            from hack.testenv import ControlPlane

            with tempfile.TemporaryDirectory() as d, ControlPlane(Path(d), nodes=0) as cp:
                client = Client(
                    RestConfig.from_kubeconfig(str(cp.kubeconfig), qps=2000, burst=2000)
                )
                bench_informer(client, a.count)


if __name__ == "__main__":
    main()
