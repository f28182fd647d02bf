"""``python -m bench.crd_cost REV_A REV_B``: what the GPUWorkload CRD of two git
revisions costs the kube-apiserver per status write, paired on one control plane;
with ``--creates``, per GPUWorkload create, the CRD and the GPUWorkload admission
policies of each revision in place, and a pod create beside them.

The CRD is what the API server runs on every write of a workload (its schema and its
CEL rules), status writes included. One fresh local control plane, 300 workloads; in
each round the CRD of each revision in turn (the order alternates between rounds, so
a drift of the process's cost over time falls on both) is put in place, and
``-n`` status writes as the status writer sends them go over 8 connections; the
kube-apiserver's CPU meanwhile, per write, is printed, then each revision's median
and the paired differences. A difference smaller than the spread of the pairs is
noise on a shared machine: say so.

``--creates``: in each round, ``-n`` GPUWorkload creates (the benchmark's unit) under
each revision's CRD and the admission objects a GPUWorkload create meets in a namespace
without our labels (:func:`policies_at`: ``POLICY_FILE``'s, ``workload-priority-class``
of ``PRIORITY_FILE`` and the finalizer policy of ``FINALIZER_FILE``), then ``-n``
creates of the benchmark's pod (same container, one GPU); each line gives the CPU per
create and the p50 and p99 of the answer's time over the 8 connections, the summary
each revision's median and its ratio to the pod's. ``floor`` as a revision: the create
with nothing of ours evaluated (:data:`FLOOR`). The objects stay (as in the
benchmark's burst), so a later round's creates find more of them; the alternating
order spreads that over both revisions (with more than two revisions, it runs forward
and backward over all of them, each paired with the first). Other work of the API
server only adds to a round's allocations (the controller manager's informers listing
every GPUWorkload again after a CRD change, at their own time), so the fewest of the
rounds is printed too. ``--priority-classes N`` adds N PriorityClasses to the two
built in (``workload-priority-class`` evaluates once per class in the cluster; only
78151a8 to 6207d52 labelled a create naming no class so that it skipped them).
"""

from __future__ import annotations

import argparse
import copy
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from bench import e2e
from bench.apicost import writer_patch
from bench.kube import proc_stats

CRD_FILE = "config/crd/gpu.orchestrator.dev_gpuworkloads.yaml"
POLICY_FILE = "config/crd/gpuworkload-validating-admission-policy.yaml"
#: of this file, only :data:`PRIORITY_CLASS` (the others match labelled namespaces,
#: or pods)
PRIORITY_FILE = "config/crd/tenant-isolation-admission-policies.yaml"
PRIORITY_CLASS = f"workload-priority-class.{e2e.GROUP}"
FINALIZER_FILE = "config/admission-finalizer/gpuworkload-finalizer-policy.yaml"
#: ``--creates``: a "revision" with none of the CRD's rules (HEAD's CRD without them)
#: and none of :func:`policies_at`'s objects: what is left of a GPUWorkload create when
#: nothing of ours is evaluated
FLOOR = "floor"
_PLURAL = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
           "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
           "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
           "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings"}
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gpuworkloads.{e2e.GROUP}"
WORKLOADS = 300


def crd_at(rev: str) -> dict:
    text = subprocess.run(["git", "show", f"{rev}:{CRD_FILE}"], capture_output=True,
                          text=True, check=True).stdout
    return yaml.safe_load(text)


def _docs_at(rev: str, path: str) -> list[dict]:
    out = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
    if out.returncode != 0:  # not in that revision
        return []
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def policies_at(rev: str) -> list[dict]:
    """The admission objects of ``rev`` that a GPUWorkload create meets in a namespace
    without our labels."""
    return [*_docs_at(rev, POLICY_FILE),
            *(d for d in _docs_at(rev, PRIORITY_FILE) if d["metadata"]["name"] == PRIORITY_CLASS),
            *_docs_at(rev, FINALIZER_FILE)]


def _path(kind: str, api_version: str, name: str = "") -> str:
    return f"/apis/{api_version}/{_PLURAL[kind]}" + (f"/{name}" if name else "")


def _cache_inits(api: Any) -> float:
    """How often the kube-apiserver has (re)built its watch cache of GPUWorkloads."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in api.text("/metrics").splitlines()
               if line.startswith("apiserver_watch_cache_initializations_total{")
               and 'resource="gpuworkloads"' in line)


def _put_crd(api: Any, crd: dict) -> None:
    """``crd`` in place, if it is not already, and the API server settled: a changed
    schema has it build the resource's storage anew at the next request, its watch
    cache listing and decoding every GPUWorkload there is (thousands, rounds in), which
    must not fall into the creates measured next."""
    cur = api.must("GET", CRD_PATH)
    if cur["spec"]["versions"] == crd["spec"]["versions"]:
        return
    inits = _cache_inits(api)
    crd = copy.deepcopy(crd)
    crd["metadata"] = cur["metadata"]
    if api.must("PUT", CRD_PATH, crd)["metadata"]["generation"] == cur["metadata"]["generation"]:
        return  # the same spec as the API server has it
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(1.0)
        api.request("GET", f"/apis/{e2e.GROUP}/{e2e.VERSION}/gpuworkloads?limit=1")
        if _cache_inits(api) > inits:
            return
    raise RuntimeError("the GPUWorkload watch cache was not rebuilt within 120 s")


def _put_policies(api: Any, docs: list[dict], every: dict[tuple[str, str], str]) -> None:
    """``docs`` in place (created or replaced); the others of ``every`` ((kind, name):
    apiVersion) deleted, bindings first."""
    keep = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for kind, name in sorted(set(every) - keep, reverse=True):  # ...Binding first
        api.request("DELETE", _path(kind, every[kind, name], name))
    for d in docs:
        path = _path(d["kind"], d["apiVersion"])
        body = copy.deepcopy(d)
        code, cur = api.request("GET", f"{path}/{d['metadata']['name']}")
        if code == 200:
            body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            api.must("PUT", f"{path}/{d['metadata']['name']}", body)
        else:
            api.must("POST", path, body)


def _allocs(api: Any) -> tuple[float, float]:
    """The kube-apiserver's own count of heap allocations and bytes allocated so far
    (its /metrics): unlike CPU time, what a shared machine's load leaves alone."""
    got = {}
    for line in api.text("/metrics").splitlines():
        name, _, value = line.partition(" ")
        if name in ("go_memstats_mallocs_total", "go_memstats_alloc_bytes_total"):
            got[name] = float(value)
    return got["go_memstats_mallocs_total"], got["go_memstats_alloc_bytes_total"]


def _creates(api: Any, pid: int, bodies: list[tuple[str, dict]]
             ) -> tuple[float, float, float, float, float]:
    """``bodies`` (path, object) created over 8 connections: kube-apiserver CPU ms per
    create, p50 and p99 ms of the answers, and its heap allocations (count, KiB) per
    create."""
    times: list[float] = []
    errors: list[str] = []

    def send(chunk: list[tuple[str, dict]]) -> None:
        for path, body in chunk:
            t0 = time.perf_counter()
            code, out = api.request("POST", path, body)
            times.append(time.perf_counter() - t0)
            if code >= 300:
                errors.append(f"{code} {str(out)[:200]}")
                return

    allocs, alloc_bytes = _allocs(api)
    before = proc_stats(pid)["cpu_s"]
    threads = [threading.Thread(target=send, args=(bodies[k::8],)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(1.0)  # the watch cache's decoding of the last ones
    cpu_ms = 1000 * (proc_stats(pid)["cpu_s"] - before) / len(bodies)
    allocs_after, alloc_bytes_after = _allocs(api)
    if errors:
        raise RuntimeError(f"{len(errors)} creates failed: {errors[0]}")
    times.sort()
    return (cpu_ms, 1000 * times[len(times) // 2],
            1000 * times[min(len(times) - 1, int(0.99 * len(times)))],
            (allocs_after - allocs) / len(bodies),
            (alloc_bytes_after - alloc_bytes) / 1024 / len(bodies))


def _without_rules(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [_without_rules(v) for v in node]
    return node


def compare_creates(api: Any, pid: int, ns: str, revs: list[str], n: int, rounds: int
                    ) -> None:
    """``--creates``: the module docstring says what is printed."""
    crds = {rev: crd_at("HEAD" if rev == FLOOR else rev) for rev in revs}
    policies = {rev: [] if rev == FLOOR else policies_at(rev) for rev in revs}
    if FLOOR in revs:
        crds[FLOOR] = _without_rules(crds[FLOOR])
    every = {(d["kind"], d["metadata"]["name"]): d["apiVersion"]
             for docs in policies.values() for d in docs}
    wl = f"/apis/{e2e.GROUP}/{e2e.VERSION}/namespaces/{ns}/gpuworkloads"
    pods = f"/api/v1/namespaces/{ns}/pods"
    costs: dict[str, list[tuple[float, ...]]] = {rev: [] for rev in [*revs, "pod"]}

    def line(what: str, c: tuple[float, ...]) -> str:
        return (f"{what:<12} {c[0]:.2f} ms per create, p50 {c[1]:.1f} ms, p99 {c[2]:.1f} ms, "
                f"{c[3]:.0f} allocations ({c[4]:.1f} KiB)")

    for r in range(rounds):
        for k, rev in enumerate(revs if r % 2 == 0 else list(reversed(revs))):
            _put_crd(api, crds[rev])
            _put_policies(api, policies[rev], every)
            time.sleep(5.0)  # the API server rebuilds the validators and reloads policies
            tag = f"r{r}-{k}"
            cost = _creates(api, pid, [(wl, e2e._workload(ns, f"{tag}-{i}")) for i in range(n)])
            costs[rev].append(cost)
            print(f"round {r + 1}: {line(rev, cost)}", flush=True)
        cost = _creates(api, pid, [(pods, e2e._pod(ns, f"p{r}-{i}")) for i in range(n)])
        costs["pod"].append(cost)
        print(f"round {r + 1}: {line('pod', cost)}", flush=True)
    pod = [statistics.median(c[i] for c in costs["pod"]) for i in range(5)]
    print(f"{'pod':<12} median {pod[0]:.2f} ms CPU, p50 {pod[1]:.1f} ms, p99 {pod[2]:.1f} ms, "
          f"{pod[3]:.0f} allocations ({pod[4]:.1f} KiB)")
    for rev in revs:
        med = [statistics.median(c[i] for c in costs[rev]) for i in range(5)]
        print(f"{rev:<12} median {med[0]:.2f} ms CPU ({med[0] / pod[0]:.2f}x the pod's), "
              f"p50 {med[1]:.1f} ms ({med[1] / pod[1]:.2f}x), p99 {med[2]:.1f} ms "
              f"({med[2] / pod[2]:.2f}x), {med[3]:.0f} allocations ({med[3] / pod[3]:.2f}x), "
              f"{med[4]:.1f} KiB ({med[4] / pod[4]:.2f}x); fewest in a round "
              f"{min(c[3] for c in costs[rev]):.0f} allocations")
    a = revs[0]
    for b in revs[1:]:
        for i, what, unit in ((0, "CPU per create", "ms"), (3, "allocations per create", "")):
            pairs = [x[i] - y[i] for x, y in zip(costs[a], costs[b], strict=True)]
            fmt = ".2f" if i == 0 else ".0f"
            print(f"{a} - {b}, {what}, per round: {', '.join(f'{x:+{fmt}}' for x in pairs)}"
                  f"; median {statistics.median(pairs):+{fmt}} {unit}".rstrip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.crd_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("revs", nargs="+", metavar="REV",
                   help=f"two git revisions (with --creates, two or more, each paired with "
                        f"the first; {FLOOR!r} may be one)")
    p.add_argument("-n", type=int, default=1200, help="status writes per round (1200)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--creates", action="store_true",
                   help="GPUWorkload creates (CRD and policies) against pod creates")
    p.add_argument("--bin-dir", type=Path, default=None)
    p.add_argument("--priority-classes", type=int, default=0, metavar="N",
                   help="--creates: N PriorityClasses made beside the two built in, as a "
                        "cluster with its own classes has (0)")
    args = p.parse_args(argv)
    if len(args.revs) < 2 or (len(args.revs) > 2 and not args.creates):
        p.error("two revisions (more only with --creates)")
    from hack.testenv.controlplane import binaries

    crds = {} if args.creates else {rev: crd_at(rev) for rev in args.revs}
    workdir = Path(tempfile.mkdtemp(prefix="gpu-crdcost-"))
    cp = e2e.BenchPlane(workdir, nodes=0, gpus=8, bin_dir=args.bin_dir or binaries(),
                        static_nodes=True)
    costs: dict[str, list[float]] = {rev: [] for rev in args.revs}
    try:
        cp.start()
        bench = e2e.Bench(cp, e2e.Config(sizes=[0], bursts=[0]), print)
        bench.install_crds()
        api, ns = bench.api, "crdcost"
        bench._namespace(ns)
        wl = f"/apis/{e2e.GROUP}/{e2e.VERSION}/namespaces/{ns}/gpuworkloads"
        uids = [api.must("POST", wl, e2e._workload(ns, f"u-{i}"))["metadata"]["uid"]
                for i in range(WORKLOADS)]
        pid = cp.pids()["kube-apiserver"]
        if args.creates:
            for i in range(args.priority_classes):
                api.must("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
                    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": f"crdcost-{i}"}, "value": 1000 + i})
            compare_creates(api, pid, ns, args.revs, args.n, args.rounds)
            return _loadavg()
        for r in range(args.rounds):
            for rev in args.revs if r % 2 == 0 else reversed(args.revs):
                crd = copy.deepcopy(crds[rev])
                crd["metadata"] = api.must("GET", CRD_PATH)["metadata"]
                api.must("PUT", CRD_PATH, crd)
                time.sleep(5.0)  # the API server rebuilds the resource's validators
                writes = [(f"{wl}/u-{i % WORKLOADS}/status",
                           writer_patch(uids[i % WORKLOADS], f"{rev} {r} {i}"))
                          for i in range(args.n)]
                before = proc_stats(pid)["cpu_s"]
                errors: list[str] = []

                def send(chunk: list[tuple[str, list]], errors: list[str] = errors) -> None:
                    for path, body in chunk:
                        code, out = api.request("PATCH", path, body,
                                                content_type="application/json-patch+json")
                        if code >= 300:
                            errors.append(f"{code} {str(out)[:200]}")

                threads = [threading.Thread(target=send, args=(writes[k::8],))
                           for k in range(8)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                time.sleep(1.0)  # the watch fan-out of the last ones
                ms = 1000 * (proc_stats(pid)["cpu_s"] - before) / args.n
                if errors:
                    raise RuntimeError(f"{rev}: {len(errors)} writes failed: {errors[0]}")
                costs[rev].append(ms)
                print(f"round {r + 1}: {rev:<12} {ms:.2f} ms per status write", flush=True)
    finally:
        cp.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    a, b = args.revs
    for rev in args.revs:
        print(f"{rev:<12} median {statistics.median(costs[rev]):.2f} ms "
              f"({', '.join(f'{x:.2f}' for x in costs[rev])})")
    pairs = [x - y for x, y in zip(costs[a], costs[b], strict=True)]
    print(f"{a} - {b}, per round: {', '.join(f'{x:+.2f}' for x in pairs)}; "
          f"median {statistics.median(pairs):+.2f} ms")
    return _loadavg()


def _loadavg() -> int:
    with open("/proc/loadavg") as f:
        print(f"load average: {' '.join(f.read().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
