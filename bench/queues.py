"""``python -m bench.queues``: the GPUWorkload controller with and without GPU queues,
on one local control plane, in one run (issue 25's benchmark).

    python -m bench.queues --static-nodes --nodes 100 --workloads 500   # a debug run
    python -m bench.queues --static-nodes                              # 1,000 x 8, 5,000

The same nodes, the same burst, the same controller build, one mode after the other
(each with a fresh controller process):

- ``no-queues``: ``--workloads`` one-GPU Pod-mode GPUWorkloads created as fast as
  ``--clients`` connections allow, spread over ``--queues`` namespaces that no
  GPUQueue selects (placed as without queues);
- ``queues``: the same burst over as many other namespaces, each selected by its own
  GPUQueue, the queues in ``--cohorts`` cohorts. Each queue's ``nominalGPUs`` is its
  equal part of the cluster; within a cohort the arrivals are skewed (4:2:2:1:1 for
  five queues), so the busiest queue of each cohort borrows what its quieter
  neighbours lend, and every workload still fits: both modes admit them all.

Admission is the workload's pod first seen bound (for a one-replica Pod-mode workload
the controller creates the pod only once the queue's gate and the placement both said
yes); time-to-admission runs from just before the create was sent to that. Admissions
per second: units / (first create to last admission). After each mode: no device
given twice (bench.e2e's check per namespace) and, with queues, each queue's status
(used, borrowed) against its quota. Writes ``<out>/queues.json`` and ``<out>/queues.md``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import e2e, queues_kueue
from bench.__main__ import machine, progress
from bench.kube import Creator, proc_stats
from bench.queues_report import markdown

HERE = Path(__file__).resolve().parent
NO_QUEUES, QUEUES = "no-queues", "queues"
SKEW = (4, 2, 2, 1, 1)  # arrivals per queue of a cohort, relative


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.queues", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    p.add_argument("--workloads", type=int, default=5000)
    p.add_argument("--queues", type=int, default=20)
    p.add_argument("--cohorts", type=int, default=4)
    p.add_argument("--clients", type=int, default=8,
                   help="parallel connections creating workloads (default 8)")
    p.add_argument("--rounds", type=int, default=2,
                   help="runs of each mode, alternating (default 2)")
    p.add_argument("--static-nodes", action="store_true",
                   help="BENCHMARK-ONLY nodes (see python -m bench --help)")
    p.add_argument("--kueue", action="store_true",
                   help="each round also runs the same burst through Kueue v0.17.0: a "
                        "ClusterQueue per namespace in the same cohorts, suspended Jobs, "
                        "kube-scheduler binding (bench/queues_kueue.py)")
    p.add_argument("--qps", type=float, default=None,
                   help="client QPS of every system (default: each one's own, 50)")
    p.add_argument("--api-burst", type=int, default=None,
                   help="client burst of every system (default: each one's own, 100)")
    p.add_argument("--out", type=Path, default=HERE / "results", help="results folder")
    p.add_argument("--bin-dir", type=Path, default=None)
    args = p.parse_args(argv)
    if args.queues % args.cohorts:
        p.error("--queues must be a multiple of --cohorts")
    if args.workloads > args.nodes * args.gpus:
        p.error("--workloads above the cluster's GPUs: the modes would not be comparable")
    return args


def spread(workloads: int, queues: int, cohorts: int) -> list[int]:
    """Workloads per queue: equal per cohort, skewed within one (SKEW, repeated)."""
    per_cohort = queues // cohorts
    weights = [SKEW[i % len(SKEW)] for i in range(per_cohort)] * cohorts
    total = sum(weights)
    counts = [workloads * w // total for w in weights]
    for i in range(workloads - sum(counts)):
        counts[i % queues] += 1
    return counts


def queue_manifest(name: str, ns: str, nominal: int, cohort: str) -> dict[str, Any]:
    return {"apiVersion": f"{e2e.GROUP}/{e2e.VERSION}", "kind": "GPUQueue",
            "metadata": {"name": name},
            "spec": {"nominalGPUs": nominal, "cohort": cohort,
                     "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}


class Admissions:
    """Fed by a cluster-wide pod watch: when each workload's pod (``ns/name-0``) was
    first seen bound."""

    def __init__(self, namespaces: set[str]) -> None:
        self.namespaces = namespaces
        self.bound: dict[str, float] = {}

    def handle(self, typ: str, pod: dict, t: float) -> None:
        meta = pod["metadata"]
        if typ not in ("ADDED", "MODIFIED") or meta.get("namespace") not in self.namespaces:
            return
        name = meta["name"]
        if not name.endswith("-0") or not (pod.get("spec") or {}).get("nodeName"):
            return
        self.bound.setdefault(f"{meta['namespace']}/{name[:-2]}", t)


class QueuesBench:
    def __init__(self, bench: e2e.Bench, args: argparse.Namespace) -> None:
        self.bench, self.args, self.api = bench, args, bench.api
        self.counts = spread(args.workloads, args.queues, args.cohorts)
        self.nominal = args.nodes * args.gpus // args.queues

    def make_queues(self, namespaces: list[str]) -> list[str]:
        per_cohort = self.args.queues // self.args.cohorts
        names = []
        for i, ns in enumerate(namespaces):
            name = f"bench-{ns}"
            self.api.must("POST", f"/apis/{e2e.GROUP}/{e2e.VERSION}/gpuqueues",
                          queue_manifest(name, ns, self.nominal, f"cohort-{i // per_cohort}"))
            names.append(name)
        return names

    def mode(self, mode: str, round_: int) -> dict[str, Any]:
        tag = f"{'q' if mode == QUEUES else 'n'}{round_}"
        namespaces = [f"{tag}-team-{i:02d}" for i in range(self.args.queues)]
        for ns in namespaces:
            self.bench._namespace(ns)
        queues = self.make_queues(namespaces) if mode == QUEUES else []
        pid = self.bench.start(e2e.OURS)
        try:
            progress(f"{mode}: controller pid {pid}; warm-up")
            self.bench.warm_up(e2e.OURS_SYSTEM, f"{tag}w")
            return {**self.burst(mode, pid, namespaces, queues), "round": round_}
        finally:
            # before the controller stops: it removes its finalizers
            for ns in namespaces:
                self.bench._empty(ns, e2e.OURS_SYSTEM)
            self.bench.stop(e2e.OURS)
            for name in queues:
                self.api.request("DELETE", f"/apis/{e2e.GROUP}/{e2e.VERSION}/gpuqueues/{name}")

    def burst(self, mode: str, pid: int, namespaces: list[str],
              queues: list[str]) -> dict[str, Any]:
        units = self.args.workloads
        seen = Admissions(set(namespaces))
        watch = self.api.watch("/api/v1/pods", seen.handle)
        creator = Creator(self.api, self.args.clients)
        items = [(ns, f"u-{j:05d}") for i, ns in enumerate(namespaces)
                 for j in range(self.counts[i])]
        items.sort(key=lambda x: (x[1], x[0]))  # interleaved: every queue busy at once
        cpu0 = proc_stats(pid)["cpu_s"]
        t_start = time.time()
        for ns, name in items:
            creator.submit(e2e.OURS_SYSTEM.resource_path.format(ns=ns),
                           e2e.OURS_SYSTEM.build(ns, name), f"{ns}/{name}")
        deadline = time.time() + 120 + units / 5
        last = 0.0
        try:
            while len(seen.bound) < units and time.time() < deadline:
                if creator.errors and len(creator.done) + len(creator.errors) >= units:
                    break
                time.sleep(0.1)
                if time.time() - last >= 5:
                    last = time.time()
                    progress(f"  {mode:>9}: created {len(creator.done):>5}/{units}  admitted "
                             f"{len(seen.bound):>5}/{units} ({time.time() - t_start:5.1f}s)")
        finally:
            watch.stop()
            creator.close()
        cpu = proc_stats(pid)["cpu_s"] - cpu0
        statuses = self.queue_statuses(queues) if queues else {}
        violations = sum(self.bench.check(e2e.OURS_SYSTEM, ns)["violations"]
                         for ns in namespaces)
        lat = [seen.bound[u] - creator.sent[u] for u in seen.bound if u in creator.sent]
        first = min(creator.sent.values(), default=t_start)
        elapsed = max(seen.bound.values(), default=first) - first
        row = {"mode": mode, "units": units, "admitted": len(seen.bound),
               "create_errors": creator.errors[:5], "create_error_count": len(creator.errors),
               "seconds_first_create_to_last_admission": round(elapsed, 3),
               "admissions_per_s": round(len(seen.bound) / elapsed, 1) if elapsed else None,
               "time_to_admission_p50_s": e2e._round(e2e._pct(lat, 0.5)),
               "time_to_admission_p99_s": e2e._round(e2e._pct(lat, 0.99)),
               "time_to_admission_max_s": e2e._round(max(lat, default=None)),
               "controller_cpu_s": round(cpu, 2),
               "peak_rss_mib": proc_stats(pid)["peak_rss_mib"],
               "devices_given_twice": violations, "queues": statuses,
               "loadavg_after": e2e._loadavg(),
               "foreign_apiservers": e2e.foreign_apiservers(
                   self.bench.cp.pids().get("kube-apiserver"))}
        progress(f"  {mode}: {row['admitted']}/{units} admitted in {elapsed:.1f}s -> "
                 f"{row['admissions_per_s']}/s, p50 {row['time_to_admission_p50_s']}s "
                 f"p99 {row['time_to_admission_p99_s']}s, cpu {row['controller_cpu_s']}s, "
                 f"devices given twice: {violations}")
        return row

    def queue_statuses(self, queues: list[str]) -> dict[str, Any]:
        """Each queue's status with its arrivals, once the queue-status controller
        shows no workload pending (the workloads' own status lags their pods), or
        after 60 s."""
        deadline = time.time() + 60
        while True:
            got = [self.api.must("GET", f"/apis/{e2e.GROUP}/{e2e.VERSION}/gpuqueues/{name}")
                   for name in queues]
            if time.time() > deadline or all(
                    (q.get("status") or {}).get("pendingWorkloads") == 0 for q in got):
                break
            time.sleep(2)
        out = {}
        for i, (name, q) in enumerate(zip(queues, got, strict=True)):
            s = q.get("status") or {}
            out[name] = {"cohort": q["spec"]["cohort"], "nominal": self.nominal,
                         "arrivals": self.counts[i], "used": s.get("usedGPUs"),
                         "borrowed": s.get("borrowedGPUs"), "lent": s.get("lentGPUs"),
                         "pending": s.get("pendingWorkloads")}
        return out


def main(argv: list[str] | None = None) -> int:
    from hack.testenv import signals_stop
    from hack.testenv.controlplane import binaries

    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds"),
                           "machine": machine(),
                           "args": {k: str(v) if isinstance(v, Path) else v
                                    for k, v in vars(args).items()}}
    workdir = Path(tempfile.mkdtemp(prefix="gpu-bench-queues-"))
    cfg = e2e.Config(sizes=[args.nodes], bursts=[args.workloads], gpus=args.gpus,
                     clients=args.clients, systems=[e2e.OURS], qps=args.qps,
                     api_burst=args.api_burst, static_nodes=args.static_nodes)
    cp = e2e.BenchPlane(workdir, nodes=0, gpus=args.gpus, scheduler=False,
                        bin_dir=args.bin_dir or binaries(), static_nodes=args.static_nodes)
    cp.kcm_qps, cp.kcm_burst = args.qps, args.api_burst
    bench: e2e.Bench | None = None
    with signals_stop():
        try:
            progress(f"control plane: starting in {workdir}")
            cp.start()
            bench = e2e.Bench(cp, cfg, progress)
            bench.install_crds()
            cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                       f"crd/gpuqueues.{e2e.GROUP}")
            bench.ensure_nodes(args.nodes)
            qb = QueuesBench(bench, args)
            doc["queues_spread"] = qb.counts
            doc["nominal_per_queue"] = qb.nominal
            doc["modes"] = []
            for r in range(args.rounds):  # alternating, so that the load of others
                for mode in (NO_QUEUES, QUEUES):  # falls on both modes alike
                    doc["modes"].append(qb.mode(mode, r))
                if args.kueue:
                    doc["modes"].append(queues_kueue.mode(qb, r))
        finally:
            progress("stopping everything this run started")
            if bench is not None:
                bench.stop(e2e.OURS)
                bench.stop(e2e.KUEUE)
            cp.stop()
            shutil.rmtree(workdir, ignore_errors=True)
    doc["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    (args.out / "queues.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    table = markdown(doc)
    (args.out / "queues.md").write_text(table)
    print()
    print(table)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
