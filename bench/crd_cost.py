"""``python -m bench.crd_cost REV_A REV_B``: what the GPUWorkload CRD of two git
revisions costs the kube-apiserver per status write, paired on one control plane;
with ``--creates``, per GPUWorkload create, the CRD and the GPUWorkload admission
policies (``POLICY_FILE``) of each revision in place, and a pod create beside them.

The CRD is what the API server runs on every write of a workload (its schema and its
CEL rules), status writes included. One fresh local control plane, 300 workloads; in
each round the CRD of each revision in turn (the order alternates between rounds, so
a drift of the process's cost over time falls on both) is put in place, and
``-n`` status writes as the status writer sends them go over 8 connections; the
kube-apiserver's CPU meanwhile, per write, is printed, then each revision's median
and the paired differences. A difference smaller than the spread of the pairs is
noise on a shared machine: say so.

``--creates``: in each round, ``-n`` GPUWorkload creates (the benchmark's unit) under
each revision's CRD and policies, then ``-n`` creates of the benchmark's pod (same
container, one GPU); each line gives the CPU per create and the p50 and p99 of the
answer's time over the 8 connections, the summary each revision's median and its ratio
to the pod's. ``floor`` as a revision: the create with nothing of ours evaluated
(:data:`FLOOR`). The objects stay (as in the benchmark's burst), so a later round's
creates find more of them; the alternating order spreads that over both revisions.
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
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
#: ``--creates``: a "revision" with none of the CRD's rules (HEAD's CRD without them),
#: no policy of ``POLICY_FILE`` and neither of ``OTHER_BINDINGS``: what is left of a
#: GPUWorkload create when nothing of ours is evaluated
FLOOR = "floor"
#: the other policies a GPUWorkload create meets in a namespace without our labels
OTHER_BINDINGS = (
    f"{ADMISSION}/validatingadmissionpolicybindings/workload-priority-class.{e2e.GROUP}",
    "/apis/admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicybindings/"
    "gpuworkload-children-finalizer",
)
_PLURAL = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
           "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gpuworkloads.{e2e.GROUP}"
WORKLOADS = 300


def crd_at(rev: str) -> dict:
    text = subprocess.run(["git", "show", f"{rev}:{CRD_FILE}"], capture_output=True,
                          text=True, check=True).stdout
    return yaml.safe_load(text)


def policies_at(rev: str) -> list[dict]:
    text = subprocess.run(["git", "show", f"{rev}:{POLICY_FILE}"], capture_output=True,
                          text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def _put_crd(api: Any, crd: dict) -> None:
    crd = copy.deepcopy(crd)
    crd["metadata"] = api.must("GET", CRD_PATH)["metadata"]
    api.must("PUT", CRD_PATH, crd)


def _put_policies(api: Any, docs: list[dict], every: set[tuple[str, str]]) -> None:
    """``docs`` in place (created or replaced); the others of ``every`` (kind, name)
    deleted, bindings first."""
    keep = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for kind, name in sorted(every - keep, reverse=True):  # ...Binding before ...Policy
        api.request("DELETE", f"{ADMISSION}/{_PLURAL[kind]}/{name}")
    for d in docs:
        path = f"{ADMISSION}/{_PLURAL[d['kind']]}"
        body = copy.deepcopy(d)
        code, cur = api.request("GET", f"{path}/{d['metadata']['name']}")
        if code == 200:
            body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            api.must("PUT", f"{path}/{d['metadata']['name']}", body)
        else:
            api.must("POST", path, body)


def _creates(api: Any, pid: int, bodies: list[tuple[str, dict]]) -> tuple[float, float, float]:
    """``bodies`` (path, object) created over 8 connections: kube-apiserver CPU ms per
    create, p50 and p99 ms of the answers."""
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

    before = proc_stats(pid)["cpu_s"]
    threads = [threading.Thread(target=send, args=(bodies[k::8],)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(1.0)  # the watch cache's decoding of the last ones
    cpu_ms = 1000 * (proc_stats(pid)["cpu_s"] - before) / len(bodies)
    if errors:
        raise RuntimeError(f"{len(errors)} creates failed: {errors[0]}")
    times.sort()
    return (cpu_ms, 1000 * times[len(times) // 2],
            1000 * times[min(len(times) - 1, int(0.99 * len(times)))])


def _without_rules(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [_without_rules(v) for v in node]
    return node


def _put_other_bindings(api: Any, saved: dict[str, dict], present: bool) -> None:
    for path, b in saved.items():
        if not present:
            api.request("DELETE", path)
        elif api.request("GET", path)[0] == 404:
            api.must("POST", path.rsplit("/", 1)[0],
                     {"apiVersion": b["apiVersion"], "kind": b["kind"],
                      "metadata": {"name": b["metadata"]["name"]}, "spec": b["spec"]})


def compare_creates(api: Any, pid: int, ns: str, revs: list[str], n: int, rounds: int
                    ) -> None:
    """``--creates``: the module docstring says what is printed."""
    crds = {rev: crd_at("HEAD" if rev == FLOOR else rev) for rev in revs}
    policies = {rev: [] if rev == FLOOR else policies_at(rev) for rev in revs}
    if FLOOR in revs:
        crds[FLOOR] = _without_rules(crds[FLOOR])
    others = {path: api.must("GET", path) for path in OTHER_BINDINGS}
    every = {(d["kind"], d["metadata"]["name"]) for docs in policies.values() for d in docs}
    wl = f"/apis/{e2e.GROUP}/{e2e.VERSION}/namespaces/{ns}/gpuworkloads"
    pods = f"/api/v1/namespaces/{ns}/pods"
    costs: dict[str, list[tuple[float, float, float]]] = {rev: [] for rev in [*revs, "pod"]}
    for r in range(rounds):
        for k, rev in enumerate(revs if r % 2 == 0 else list(reversed(revs))):
            _put_crd(api, crds[rev])
            _put_policies(api, policies[rev], every)
            _put_other_bindings(api, others, rev != FLOOR)
            time.sleep(5.0)  # the API server rebuilds the validators and reloads policies
            tag = f"r{r}-{k}"
            cost = _creates(api, pid, [(wl, e2e._workload(ns, f"{tag}-{i}")) for i in range(n)])
            costs[rev].append(cost)
            print(f"round {r + 1}: {rev:<12} {cost[0]:.2f} ms per create, p50 {cost[1]:.1f} "
                  f"ms, p99 {cost[2]:.1f} ms", flush=True)
        cost = _creates(api, pid, [(pods, e2e._pod(ns, f"p{r}-{i}")) for i in range(n)])
        costs["pod"].append(cost)
        print(f"round {r + 1}: {'pod':<12} {cost[0]:.2f} ms per create, p50 {cost[1]:.1f} ms, "
              f"p99 {cost[2]:.1f} ms", flush=True)
    pod = [statistics.median(c[i] for c in costs["pod"]) for i in range(3)]
    print(f"{'pod':<12} median {pod[0]:.2f} ms CPU, p50 {pod[1]:.1f} ms, p99 {pod[2]:.1f} ms")
    for rev in revs:
        med = [statistics.median(c[i] for c in costs[rev]) for i in range(3)]
        print(f"{rev:<12} median {med[0]:.2f} ms CPU ({med[0] / pod[0]:.2f}x the pod's), "
              f"p50 {med[1]:.1f} ms ({med[1] / pod[1]:.2f}x), p99 {med[2]:.1f} ms "
              f"({med[2] / pod[2]:.2f}x)")
    a, b = revs
    pairs = [x[0] - y[0] for x, y in zip(costs[a], costs[b], strict=True)]
    print(f"{a} - {b}, CPU per create, per round: {', '.join(f'{x:+.2f}' for x in pairs)}; "
          f"median {statistics.median(pairs):+.2f} ms")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.crd_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("revs", nargs=2, metavar="REV",
                   help=f"two git revisions (with --creates, {FLOOR!r} may be one)")
    p.add_argument("-n", type=int, default=1200, help="status writes per round (1200)")
    p.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    p.add_argument("--creates", action="store_true",
                   help="GPUWorkload creates (CRD and policies) against pod creates")
    p.add_argument("--bin-dir", type=Path, default=None)
    args = p.parse_args(argv)
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
