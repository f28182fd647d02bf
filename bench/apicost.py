"""``python -m bench.apicost``: kube-apiserver CPU per request, for each kind of
request a unit costs (ours and kube-scheduler's), on a fresh local control plane.

Each kind is sent N times over 8 connections (the GPUWorkload create twice: without
any mutating admission, and with config/admission-finalizer putting our finalizer
into it, installed just before); the CPU the kube-apiserver process
used meanwhile (``/proc/<pid>/stat``), divided by N, is printed. Nothing else
writes meanwhile (no controller, no scheduler; kwok runs no pods: no node exists),
so the numbers are the requests' own cost plus their watch fan-out. Last it prints
the ratio those costs alone set for a unit's kube-apiserver CPU, ours against
kube-scheduler's (``unit_floor``), before the watch fan-out each system adds.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import e2e
from bench.kube import proc_stats

CONDITIONS = [{"type": t, "status": "True", "reason": t, "message": "placed on node n devices 3",
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}
              for t in ("Scheduled", "Ready")]


FINALIZER_POLICY_CREATE = "GPUWorkload create, finalizer by policy"
POD_CREATE = "Pod create (bound or not)"
BINDING = "Binding (kube-scheduler's)"
EVENT_CREATE = "Event create"
POD_RUNNING = "Pod status patch (kwok's Running)"
RUNNING = {"status": {"phase": "Running", "podIP": "127.0.0.2", "hostIP": "127.0.0.1",
                      "startTime": "2026-01-01T00:00:00Z",
                      "conditions": [{"type": t, "status": "True",
                                      "lastTransitionTime": "2026-01-01T00:00:00Z"}
                                     for t in ("Initialized", "Ready", "ContainersReady",
                                               "PodScheduled")],
                      "containerStatuses": [{"name": "main", "image": "busybox:1.36",
                                             "imageID": "", "ready": True, "restartCount": 0,
                                             "started": True, "state": {"running": {
                                                 "startedAt": "2026-01-01T00:00:00Z"}}}]}}


def status(message: str) -> dict[str, Any]:
    """A status the size of the controller's for a running one-GPU workload."""
    return {"phase": "Running", "message": message, "observedGeneration": 1, "retries": 0,
            "placements": [{"index": 0, "node": "n", "devices": [3]}], "gpus": 1, "nodes": "n",
            "replicas": 1, "selector": "gpu.orchestrator.dev/workload=u",
            "conditions": CONDITIONS}


def writer_patch(uid: str, message: str) -> list[dict[str, Any]]:
    """The status writer's JSON patch (controllers/status/patches.py): a test of the
    UID, then the whole status."""
    return [{"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "add", "path": "/status", "value": status(message)}]


def strip_crd_rules(api: Any) -> None:
    """The GPUWorkload CRD without its CEL rules, in force when this returns."""
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gpuworkloads.{e2e.GROUP}"
    crd = api.must("GET", path)

    def strip(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("x-kubernetes-validations", None)
            for v in node.values():
                strip(v)
        elif isinstance(node, list):
            for v in node:
                strip(v)
    strip(crd["spec"])
    api.must("PUT", path, crd)
    time.sleep(5.0)  # the API server rebuilds the resource's storage and validators


def unit_floor(costs: dict[str, float]) -> str:
    """What a unit's own requests cost, ours against kube-scheduler's, before any watch
    fan-out, and with the pod's Running patch that both pay: ours is the user's create (the
    finalizer by policy), one status write (the writer's patch, the mean of its
    batches), the pod and an Event; kube-scheduler's the pod, a Binding and an Event."""
    writer = [v for k, v in costs.items() if k.startswith("GPUWorkload status as the writer")]
    ours = (costs[FINALIZER_POLICY_CREATE] + sum(writer) / len(writer)
            + costs[POD_CREATE] + costs[EVENT_CREATE])
    theirs = costs[POD_CREATE] + costs[BINDING] + costs[EVENT_CREATE]
    both = costs[POD_RUNNING]
    return (f"a unit's own requests: ours {ours:.2f} ms (create, status, pod, Event), "
            f"kube-scheduler's {theirs:.2f} ms (pod, Binding, Event): {ours / theirs:.2f}x; "
            f"with the pod's Running patch both pay ({both:.2f} ms): "
            f"{(ours + both) / (theirs + both):.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.apicost", description=__doc__)
    p.add_argument("-n", type=int, default=600, help="requests of each kind (default 600)")
    p.add_argument("--bin-dir", type=Path, default=None)
    p.add_argument("--without-crd-rules", action="store_true",
                   help="strip the GPUWorkload CRD's x-kubernetes-validations (its CEL "
                        "rules) after installing it: what they cost each write")
    args = p.parse_args(argv)
    from hack.testenv.controlplane import binaries

    workdir = Path(tempfile.mkdtemp(prefix="gpu-apicost-"))
    cp = e2e.BenchPlane(workdir, nodes=0, gpus=8, bin_dir=args.bin_dir or binaries(),
                        static_nodes=True)
    try:
        cp.start()
        bench = e2e.Bench(cp, e2e.Config(sizes=[0], bursts=[0], finalizer_policy=False), print)
        bench.install_crds()
        if args.without_crd_rules:
            strip_crd_rules(bench.api)
        ns = "apicost"
        bench._namespace(ns)
        api = bench.api
        n = args.n
        wl = f"/apis/{e2e.GROUP}/{e2e.VERSION}/namespaces/{ns}/gpuworkloads"
        merge = "application/merge-patch+json"
        Requests = list[tuple[str, str, Any, str]]
        kinds: list[tuple[str, Requests | Callable[[], Requests]]] = [
            ("GPUWorkload create, no admission policy",
             [("POST", wl, e2e._workload(ns, f"u-{i}"), "application/json") for i in range(n)]),
            ("GPUWorkload status merge patch",
             [("PATCH", f"{wl}/u-{i}/status", {"status": status("placed")}, merge)
              for i in range(n)]),
            ("GPUWorkload finalizer merge patch",
             [("PATCH", f"{wl}/u-{i}",
               {"metadata": {"finalizers": ["gpu.orchestrator.dev/children"]}}, merge)
              for i in range(n)]),
            ("GPUWorkload status merge patch, again",
             [("PATCH", f"{wl}/u-{i}/status", {"status": status("running")}, merge)
              for i in range(n)]),
            *[(f"GPUWorkload status as the writer sends it, {k + 1}/3",
               lambda k=k: [("PATCH", f"{wl}/u-{i}/status", writer_patch(uids[f"u-{i}"],
                                                                        f"written {k}"),
                             "application/json-patch+json") for i in range(n)])
              for k in range(3)],
            (POD_CREATE,
             [("POST", f"/api/v1/namespaces/{ns}/pods", e2e._pod(ns, f"p-{i}"),
               "application/json") for i in range(n)]),
            (BINDING,
             [("POST", f"/api/v1/namespaces/{ns}/pods/p-{i}/binding",
               {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"p-{i}"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n"}},
               "application/json") for i in range(n)]),
            (FINALIZER_POLICY_CREATE,
             [("POST", wl, e2e._workload(ns, f"f-{i}"), "application/json") for i in range(n)]),
            (POD_RUNNING,
             [("PATCH", f"/api/v1/namespaces/{ns}/pods/p-{i}/status", RUNNING, merge)
              for i in range(n)]),
            (EVENT_CREATE,
             [("POST", f"/api/v1/namespaces/{ns}/events",
               {"metadata": {"name": f"e-{i}"}, "reason": "Scheduled", "message": "placed",
                "type": "Normal", "count": 1,
                "involvedObject": {"kind": "Pod", "name": f"p-{i}", "namespace": ns}},
               "application/json") for i in range(n)]),
        ]
        uids: dict[str, str] = {}
        costs: dict[str, float] = {}
        pid = cp.pids()["kube-apiserver"]
        print(f"kube-apiserver CPU per request ({n} of each, 8 connections):")
        for label, listed in kinds:
            items = listed() if callable(listed) else listed
            if label == FINALIZER_POLICY_CREATE:
                bench.install_finalizer_policy()
            before = proc_stats(pid)["cpu_s"]
            errors: list[str] = []
            t0 = time.time()

            def send(chunk: list[tuple[str, str, Any, str]], errors: list[str] = errors) -> None:
                for method, path, body, ct in chunk:
                    code, out = api.request(method, path, body, content_type=ct)
                    if method == "POST" and code == 201 and path == wl:
                        uids[out["metadata"]["name"]] = out["metadata"]["uid"]
                    if code >= 300:
                        errors.append(f"{code} {str(out)[:200]}")

            threads = [threading.Thread(target=send, args=(items[i::8],)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.time() - t0
            time.sleep(1.0)  # the watch fan-out of the last ones
            cpu = proc_stats(pid)["cpu_s"] - before
            costs[label] = 1000 * cpu / n
            print(f"  {label:<40} {1000 * cpu / n:6.2f} ms  ({n / took:5.0f}/s"
                  f"{f', {len(errors)} errors: ' + errors[0] if errors else ''})")
        print(unit_floor(costs))
        with open("/proc/loadavg") as f:
            print(f"load average: {' '.join(f.read().split()[:3])}")
    finally:
        cp.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
