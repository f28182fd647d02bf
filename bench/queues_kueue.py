"""``python -m bench.queues --kueue``: the queues benchmark's shape for Kueue.

The same namespaces, arrivals and quotas as ours' ``queues`` mode (bench/queues.py):
one ClusterQueue per namespace of ``nominal`` GPUs, the queues in cohorts
(``spec.cohortName``, borrowing without limit from the cohort, lending all it does
not use), a LocalQueue in each namespace, and the burst as one-GPU Jobs created
suspended with the queue-name label. kube-scheduler binds the pods.

Two times per unit: admitted (the Job first seen unsuspended: Kueue admitted its
Workload) and bound (its pod first seen with a node, as for ours). After the burst:
each ClusterQueue's status (used, borrowed, pending) against its quota, and the
bound ``nvidia.com/gpu`` per node against capacity.
"""

from __future__ import annotations

import time
from typing import Any

from bench import e2e
from bench.__main__ import progress
from bench.kube import Creator, proc_stats
from bench.kueue import GPU, GROUP, VERSION, cluster_queue

MODE = "kueue"


class Times:
    """Fed by cluster-wide watches of Jobs and pods: when each ``ns/job`` was first
    seen unsuspended, and its pod first seen bound."""

    def __init__(self, namespaces: set[str]) -> None:
        self.namespaces = namespaces
        self.admitted: dict[str, float] = {}
        self.bound: dict[str, float] = {}

    def job(self, typ: str, job: dict, t: float) -> None:
        meta = job["metadata"]
        if typ in ("ADDED", "MODIFIED") and meta.get("namespace") in self.namespaces and \
                (job.get("spec") or {}).get("suspend") is False:
            self.admitted.setdefault(f"{meta['namespace']}/{meta['name']}", t)

    def pod(self, typ: str, pod: dict, t: float) -> None:
        meta = pod["metadata"]
        if typ not in ("ADDED", "MODIFIED") or meta.get("namespace") not in self.namespaces:
            return
        name = e2e._job_of(pod)
        if name and (pod.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(f"{meta['namespace']}/{name}", t)


def mode(qb: Any, round_: int) -> dict[str, Any]:
    """One burst through Kueue on ``qb``'s bench (a ``bench.queues.QueuesBench``)."""
    bench, args = qb.bench, qb.args
    tag = f"k{round_}"
    namespaces = [f"{tag}-team-{i:02d}" for i in range(args.queues)]
    per_cohort = args.queues // args.cohorts
    pid = bench.start(e2e.KUEUE)
    queues = []
    try:
        for i, ns in enumerate(namespaces):
            name = f"bench-{ns}"
            bench.kueue.apply(cluster_queue(name, qb.nominal, f"cohort-{i // per_cohort}",
                                            borrow=True))
            queues.append(name)
            bench._namespace(ns)
            bench.kueue.local_queue(ns, cq=name)
        progress(f"{MODE}: Kueue pid {pid}, {len(queues)} ClusterQueues; warm-up")
        bench.warm_up(e2e.KUEUE_SYSTEM, f"{tag}w")
        return {**burst(qb, pid, namespaces, queues), "round": round_}
    finally:
        for ns in namespaces:
            bench._empty(ns, e2e.KUEUE_SYSTEM)
        bench.stop(e2e.KUEUE)
        for name in queues:
            bench.api.request("DELETE", f"/apis/{GROUP}/{VERSION}/clusterqueues/{name}")


def burst(qb: Any, pid: int, namespaces: list[str], queues: list[str]) -> dict[str, Any]:
    bench, args, api = qb.bench, qb.args, qb.bench.api
    units = args.workloads
    seen = Times(set(namespaces))
    watches = [api.watch("/apis/batch/v1/jobs", seen.job), api.watch("/api/v1/pods", seen.pod)]
    creator = Creator(api, args.clients)
    items = [(ns, f"u-{j:05d}") for i, ns in enumerate(namespaces)
             for j in range(qb.counts[i])]
    items.sort(key=lambda x: (x[1], x[0]))  # interleaved, as for ours
    cpu0 = proc_stats(pid)["cpu_s"]
    t_start = time.time()
    for ns, name in items:
        creator.submit(e2e.KUEUE_SYSTEM.resource_path.format(ns=ns),
                       e2e.KUEUE_SYSTEM.build(ns, name), f"{ns}/{name}")
    deadline = time.time() + 120 + units / 5
    last = 0.0
    try:
        while len(seen.bound) < units and time.time() < deadline:
            if creator.errors and len(creator.done) + len(creator.errors) >= units:
                break
            time.sleep(0.1)
            if time.time() - last >= 5:
                last = time.time()
                progress(f"  {MODE:>9}: created {len(creator.done):>5}/{units}  admitted "
                         f"{len(seen.admitted):>5}/{units}  bound {len(seen.bound):>5}/{units} "
                         f"({time.time() - t_start:5.1f}s)")
    finally:
        for w in watches:
            w.stop()
        creator.close()
    cpu = proc_stats(pid)["cpu_s"] - cpu0
    statuses = queue_statuses(qb, queues)
    violations = sum(bench.check(e2e.KUEUE_SYSTEM, ns)["violations"] for ns in namespaces)
    first = min(creator.sent.values(), default=t_start)

    def lat(times: dict[str, float]) -> list[float]:
        return [times[u] - creator.sent[u] for u in times if u in creator.sent]

    adm, bnd = lat(seen.admitted), lat(seen.bound)
    elapsed = max(seen.bound.values(), default=first) - first
    adm_elapsed = max(seen.admitted.values(), default=first) - first
    row = {"mode": MODE, "units": units, "admitted": len(seen.bound),
           "kueue_admitted": len(seen.admitted),
           "create_errors": creator.errors[:5], "create_error_count": len(creator.errors),
           "seconds_first_create_to_last_admission": round(elapsed, 3),
           "seconds_first_create_to_last_kueue_admission": round(adm_elapsed, 3),
           "admissions_per_s": round(len(seen.bound) / elapsed, 1) if elapsed else None,
           "time_to_admission_p50_s": e2e._round(e2e._pct(bnd, 0.5)),
           "time_to_admission_p99_s": e2e._round(e2e._pct(bnd, 0.99)),
           "time_to_admission_max_s": e2e._round(max(bnd, default=None)),
           "kueue_admission_p50_s": e2e._round(e2e._pct(adm, 0.5)),
           "kueue_admission_p99_s": e2e._round(e2e._pct(adm, 0.99)),
           "controller_cpu_s": round(cpu, 2), "peak_rss_mib": proc_stats(pid)["peak_rss_mib"],
           "devices_given_twice": violations, "queues": statuses,
           "loadavg_after": e2e._loadavg(),
           "foreign_apiservers": e2e.foreign_apiservers(bench.cp.pids().get("kube-apiserver"))}
    progress(f"  {MODE}: {len(seen.admitted)}/{units} admitted by Kueue in {adm_elapsed:.1f}s, "
             f"{row['admitted']}/{units} bound in {elapsed:.1f}s -> {row['admissions_per_s']}/s,"
             f" p50 {row['time_to_admission_p50_s']}s p99 {row['time_to_admission_p99_s']}s, "
             f"Kueue cpu {row['controller_cpu_s']}s, GPUs over capacity: {violations}")
    return row


def queue_statuses(qb: Any, queues: list[str]) -> dict[str, Any]:
    """Each ClusterQueue's GPUs in use and borrowed, once none has a pending workload
    (or after 60 s), with its arrivals and quota."""
    api = qb.bench.api
    deadline = time.time() + 60
    while True:
        got = [api.must("GET", f"/apis/{GROUP}/{VERSION}/clusterqueues/{name}")
               for name in queues]
        if time.time() > deadline or all(
                (q.get("status") or {}).get("pendingWorkloads", 0) == 0 for q in got):
            break
        time.sleep(2)
    out = {}
    for i, (name, q) in enumerate(zip(queues, got, strict=True)):
        s = q.get("status") or {}
        used = borrowed = 0
        for flavor in s.get("flavorsUsage") or ():
            for r in flavor.get("resources") or ():
                if r.get("name") == GPU:
                    used += _qty(r.get("total"))
                    borrowed += _qty(r.get("borrowed"))
        out[name] = {"cohort": q["spec"].get("cohortName"), "nominal": qb.nominal,
                     "arrivals": qb.counts[i], "used": used, "borrowed": borrowed,
                     "lent": None, "pending": s.get("pendingWorkloads")}
    return out


def _qty(x: Any) -> int:
    return int(str(x or 0))
