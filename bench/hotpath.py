"""Micro-measurements of the controller's per-reconcile costs (a script, not a test;
no server, one process, best of several rounds so that a loaded machine shows less).

    python -m bench.hotpath models      # the reconcile's read of its workload, µs
    python -m bench.hotpath placement   # one placement decision, µs
    python -m bench.hotpath reconcile   # a unit's reconciles with the unit tests' fakes, µs
    python -m bench.hotpath podevent    # the created pod's own events in the ledger, µs
    python -m bench.hotpath headers     # a response's header block parsed, µs
    python -m bench.hotpath http        # the client's CPU per request, urllib3 and http.client

``models``: ``WorkloadModels.model`` on the objects a workload's reconciles see in
one life: each a new version (a new resourceVersion, another status, the same
spec and generation), as the informer hands them out after our status writes and
the pods' events. A one-GPU workload and an 8-replica gang, each with a pod
template and a status of its size.

``placement``: ``Scheduler.schedule`` (the decision, no booking) of a one-GPU
workload and an 8-replica gang of one GPU each, leastLoaded and bestFit, on the
micro-benchmark's cluster (``bench/micro.py``: 100 nodes x 8 GPUs, half of them
booked at random).

``reconcile``: ``GPUWorkloadReconciler.reconcile`` through a unit's life on the unit
tests' fakes (``tests/unit/controllers/fakes.py``: real caches and placement state,
a client that answers at once, no server, so no HTTP in it): a one-GPU workload
created, reconciled (placed, its pod created), its pod Running, reconciled twice
(the status, then a pod event with nothing to do); 100 nodes x 8 GPUs, 400 units,
logging as the manager does it (JSON, info, to /dev/null). Medians.
``reconcile --profile 30``: the same loop under cProfile, the reconciles only (not
the fakes' set-up between them): the 30 functions of most inclusive and of most self
time, and the self time by area (controllers, internal/scheduling, runtime, ...).

``podevent``: ``CacheEvents.on_pod`` of the pods ``reconcile``'s units created (100
nodes x 8 GPUs, 400 units placed, each pod already recorded by ``hold_created``): its
ADDED event (the informer's frozen copy, a later resourceVersion) and its status
update to Running, each holding what the create recorded. Best of 5 rounds.

``headers``: the header block kube-apiserver sends with a JSON answer, parsed by
``http.client``'s own parser (the ``email`` package) and by ``runtime/httpheaders.py``.

``http``: the client's own CPU per request (``time.process_time``), a small JSON
PATCH answered by a plain-HTTP server on 127.0.0.1 in another process: through
urllib3's ``HTTPConnectionPool.urlopen`` (how ``runtime/client.py`` sent its requests
until round 14), through ``http.client`` on one kept-alive connection, and through
``runtime.client.Client.request`` itself (a GET and a merge PATCH, no rate limit: the
whole call, JSON in and out, metrics included). No TLS: the Python layers only (TLS
runs with the GIL released).
"""

from __future__ import annotations

import argparse
import random
import re
import time
from collections.abc import Callable
from typing import Any

from api.v1alpha1.types import API_VERSION
from bench.micro import _workload, build
from controllers.gpuworkload.models import WorkloadModels
from internal.scheduling import Scheduler
from runtime.store import freeze, thaw

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


def bench_reconcile(n: int, profile: int = 0) -> None:
    import io
    import statistics

    import structlog

    from main import configure_logging
    from tests.unit.controllers.fakes import Env
    configure_logging("json", "info")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(io.StringIO()))
    env = Env(nodes=100, gpus=8)
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
    placing: list[float] = []
    running: list[float] = []

    def timed(name: str, into: list[float]) -> None:
        if prof is not None:
            prof.enable()
        t0 = time.perf_counter()
        env.reconcile(name)
        into.append(time.perf_counter() - t0)
        if prof is not None:
            prof.disable()

    for i in range(min(n, 400)):
        name = f"w{i}"
        env.workload(name, gpusPerReplica=1)
        timed(name, placing)
        env.set_phase(f"{name}-0", "Running")
        for _ in range(2):
            timed(name, running)
    print(f"reconcile placing: {statistics.median(placing) * 1e6:7.1f} µs (median)")
    print(f"reconcile running: {statistics.median(running) * 1e6:7.1f} µs (median)")
    if prof is not None:
        print_profile(prof, profile)


def bench_pod_event(n: int) -> None:
    import io

    import structlog

    from main import configure_logging
    from tests.unit.controllers.fakes import NS, Env
    configure_logging("json", "info")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(io.StringIO()))
    env = Env(nodes=100, gpus=8)
    created = []
    for i in range(400):
        env.workload(f"w{i}", gpusPerReplica=1)
        env.reconcile(f"w{i}")
        created.append(thaw(env.pods.get_by_name(f"w{i}-0", NS)))

    def echo(pod: Any, **status: Any) -> Any:
        meta = dict(pod["metadata"], resourceVersion=f"{pod['metadata']['resourceVersion']}9")
        return freeze(dict(pod, metadata=meta, status=dict(pod.get("status") or {}, **status)))

    on_pod = env.state.events.on_pod
    for what, pods in (("ADDED (the create's pod)", [echo(p) for p in created]),
                       ("MODIFIED (Running)", [echo(p, phase="Running") for p in created])):
        us = best_us(lambda i, pods=pods: on_pod(pods[i % len(pods)]), n)
        print(f"pod event {what}: {us:6.2f} µs per event")


#: where a function's file lies, for the profile's "by area" lines (first match wins)
_AREAS = (("tests/", "the unit tests' fakes"),
          ("controllers/placement/", "controllers/placement"),
          ("controllers/", "controllers (the rest)"),
          ("internal/scheduling/", "internal/scheduling"), ("internal/", "internal (the rest)"),
          ("runtime/", "runtime"), ("api/", "api"), ("site-packages/", "third-party packages"))


def _where(file: str) -> str:
    """A profiled function's file, relative to the repository or its package."""
    root = __file__.rsplit("bench/", 1)[0]
    if file.startswith(root):
        file = file[len(root):]
    if "site-packages/" in file:
        return file.split("site-packages/", 1)[1]
    return re.sub(r".*/lib/python3[.0-9]*/", "", file)


def print_profile(prof: Any, top: int) -> None:
    """The ``top`` functions by inclusive and by self time, as shares of the profiled
    time (cProfile's own cost is in it: each call costs about the same, so a function
    of many small calls reads larger than it is), and the self time by area."""
    import pstats

    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in stats.values()) or 1.0

    def name(k: tuple[str, int, str]) -> str:
        file, line, fn = k
        return fn if file == "~" else f"{fn} ({_where(file)}:{line})"

    for title, col in (("inclusive", 3), ("self", 2)):
        print(f"\nprofile: top {top} by {title} time, % of {total:.3f} s profiled")
        rows = sorted(stats.items(), key=lambda kv: -kv[1][col])[:top]
        for k, v in rows:
            print(f"  {100 * v[col] / total:5.1f}%  {v[1]:7d} calls  {name(k)}")
    areas: dict[str, float] = {}
    for (file, _, _), v in stats.items():
        path = file.split("site-packages/", 1)[0] + "site-packages/" \
            if "site-packages/" in file else _where(file)
        area = next((a for prefix, a in _AREAS if prefix in path), "the standard library, builtins")
        areas[area] = areas.get(area, 0.0) + v[2]
    print("\nprofile: self time by area")
    for area, tt in sorted(areas.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * tt / total:5.1f}%  {area}")


def bench_headers(n: int) -> None:
    import io

    from runtime import httpheaders
    block = (b"Audit-Id: 5d1c1c0e-7a8b-4a52-9a7e-8f8f8f8f8f8f\r\n"
             b"Cache-Control: no-cache, private\r\nContent-Type: application/json\r\n"
             b"X-Kubernetes-Pf-Flowschema-Uid: 1b2c3d4e-aaaa-bbbb-cccc-000000000000\r\n"
             b"X-Kubernetes-Pf-Prioritylevel-Uid: 2b2c3d4e-aaaa-bbbb-cccc-000000000000\r\n"
             b"Date: Wed, 25 Nov 2026 02:00:00 GMT\r\nContent-Length: 1234\r\n\r\n")
    for name, parse in (("email (http.client)", httpheaders.email_parse_headers),
                        ("runtime/httpheaders.py", httpheaders.parse_headers)):
        us = best_us(lambda i, parse=parse: parse(io.BytesIO(block)), n)
        print(f"headers {name}: {us:5.1f} µs per response")


_SERVER = """
import http.server, sys
body = b'{"kind":"Pod","metadata":{"name":"x","uid":"u","resourceVersion":"1"}}'
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # its header and body writes go at once
    def do_GET(self):
        self.do_PATCH()
    def do_PATCH(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def bench_http(n: int) -> None:
    import http.client
    import subprocess
    import sys

    import orjson
    import urllib3

    from runtime import Client, RestConfig

    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        body = orjson.dumps({"status": {"phase": "Running"}})
        headers = {"Accept": "application/json", "User-Agent": "bench",
                   "Content-Type": "application/merge-patch+json"}
        path = "/api/v1/namespaces/ns/pods/x/status"
        pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=1)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

        def via_urllib3() -> Any:
            r = pool.urlopen("PATCH", path, body=body, headers=headers,
                             timeout=urllib3.Timeout(total=10), retries=False, redirect=False,
                             assert_same_host=False, preload_content=True)
            return orjson.loads(r.data)

        def via_http_client() -> Any:
            conn.request("PATCH", path, body=body, headers=headers)
            return orjson.loads(conn.getresponse().read())

        client = Client(RestConfig(host=f"http://127.0.0.1:{port}"), qps=0)

        def client_get() -> Any:
            return client.request("GET", path)

        def client_patch() -> Any:
            return client.request("PATCH", path, body={"status": {"phase": "Running"}},
                                  content_type="application/merge-patch+json")

        calls = max(1, n // 4)
        for name, fn in (("urllib3 urlopen", via_urllib3), ("http.client", via_http_client),
                         ("Client.request GET", client_get),
                         ("Client.request PATCH", client_patch)):
            best = float("inf")
            for _ in range(3):
                fn()
                t0 = time.process_time()
                for _ in range(calls):
                    fn()
                best = min(best, (time.process_time() - t0) / calls)
            print(f"http {name}: {best * 1e6:5.0f} µs of the client's CPU per request")
        conn.close()
        pool.close()
    finally:
        server.terminate()
        server.wait(10)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["models", "placement", "reconcile", "podevent", "headers",
                                    "http"])
    p.add_argument("-n", type=int, default=2000, help="calls per round")
    p.add_argument("--profile", type=int, default=0, metavar="TOP",
                   help="reconcile only: run under cProfile and print the TOP functions "
                        "by inclusive and by self time, and the self time by area "
                        "(the times then include cProfile's own cost)")
    args = p.parse_args(argv)
    if args.profile and args.what != "reconcile":
        p.error("--profile is for reconcile")
    if args.what == "reconcile":
        bench_reconcile(args.n, args.profile)
        return
    {"models": bench_models, "placement": bench_placement, "podevent": bench_pod_event,
     "headers": bench_headers, "http": bench_http}[args.what](args.n)


if __name__ == "__main__":
    main()
