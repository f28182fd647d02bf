"""``python -m bench.crd_cost REV_A REV_B``: what the GPUWorkload CRD of two git
revisions costs the kube-apiserver per status write, paired on one control plane.

The CRD is what the API server runs on every write of a workload (its schema and its
CEL rules), status writes included. One fresh local control plane, 300 workloads; in
each round the CRD of each revision in turn (the order alternates between rounds, so
a drift of the process's cost over time falls on both) is put in place, and
``-n`` status writes as the status writer sends them go over 8 connections; the
kube-apiserver's CPU meanwhile, per write, is printed, then each revision's median
and the paired differences. A difference smaller than the spread of the pairs is
noise on a shared machine: say so.
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

import yaml

from bench import e2e
from bench.apicost import writer_patch
from bench.kube import proc_stats

CRD_FILE = "config/crd/gpu.orchestrator.dev_gpuworkloads.yaml"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gpuworkloads.{e2e.GROUP}"
WORKLOADS = 300


def crd_at(rev: str) -> dict:
    text = subprocess.run(["git", "show", f"{rev}:{CRD_FILE}"], capture_output=True,
                          text=True, check=True).stdout
    return yaml.safe_load(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.crd_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("revs", nargs=2, metavar="REV", help="two git revisions")
    p.add_argument("-n", type=int, default=1200, help="status writes per round (1200)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--bin-dir", type=Path, default=None)
    args = p.parse_args(argv)
    from hack.testenv.controlplane import binaries

    crds = {rev: crd_at(rev) for rev in args.revs}
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
    with open("/proc/loadavg") as f:
        print(f"load average: {' '.join(f.read().split()[:3])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
