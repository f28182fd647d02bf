"""``python -m hack.admission_window``: what a kube-apiserver restart does to admission
while our policies are installed.

A ValidatingAdmissionPolicy whose ``paramKind`` is a custom resource is a
configuration error until the API server's admission has discovered that resource,
and with ``failurePolicy: Fail`` every request the policy's match rules take is then
denied. kube-apiserver 1.34 refreshes that discovery when it starts and every 30 s
after: on a busy machine the first refresh can come before the custom resources are
served, and the window lasts until the next. Our queue policies took GPUQueue params
until they came to read the manager's namespace marks instead
(``api/v1alpha1/queue_policies.py``): with today's policies every count is 0.

On a fresh local control plane with ``config/crd`` installed, this restarts the
kube-apiserver ``--restarts`` times; after each, for ``--seconds``, it sends dry-run
creates every 0.2 s of a pod in kube-system, a pod in a tenant namespace and a
GPUWorkload, and prints how many of each were denied and when the last was.
``--burn N`` keeps N busy processes running meanwhile (the window opens only on a
loaded machine). Every process it starts is stopped by its PID.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import e2e

ROOT = Path(__file__).resolve().parents[1]
TENANT = "tenant"


def _pod(ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "probe-", "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}


def probe(api: Any, seconds: float) -> dict[str, list[float]]:
    """Denied dry-run creates of each kind, by seconds since the call."""
    gw = f"/apis/{e2e.GROUP}/{e2e.VERSION}/namespaces/{TENANT}/gpuworkloads?dryRun=All"
    kinds = {
        "pod in kube-system": ("/api/v1/namespaces/kube-system/pods?dryRun=All",
                               _pod("kube-system")),
        f"pod in {TENANT}": (f"/api/v1/namespaces/{TENANT}/pods?dryRun=All", _pod(TENANT)),
        "GPUWorkload": (gw, e2e._workload(TENANT, "probe")),
    }
    denied: dict[str, list[float]] = {k: [] for k in kinds}
    t0 = time.time()
    while time.time() - t0 < seconds:
        for kind, (path, body) in kinds.items():
            code, _ = api.request("POST", path, body)
            if code >= 300:
                denied[kind].append(time.time() - t0)
        time.sleep(0.2)
    return denied


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hack.admission_window", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--seconds", type=float, default=40.0, help="probing after each restart")
    p.add_argument("--burn", type=int, default=2, help="busy processes meanwhile (2)")
    p.add_argument("--bin-dir", type=Path, default=None)
    args = p.parse_args(argv)
    from hack.testenv.controlplane import binaries

    workdir = Path(tempfile.mkdtemp(prefix="gpu-admission-window-"))
    cp = e2e.BenchPlane(workdir, nodes=0, gpus=8, bin_dir=args.bin_dir or binaries(),
                        static_nodes=True)
    burners: list[subprocess.Popen[bytes]] = []
    try:
        cp.start()
        bench = e2e.Bench(cp, e2e.Config(sizes=[0], bursts=[0], finalizer_policy=False),
                          print)
        bench.install_crds()
        bench._namespace(TENANT)
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                   for _ in range(args.burn)]
        for n in range(args.restarts):
            cp.restart_apiserver()
            denied = probe(bench.api, args.seconds)
            print(f"restart {n + 1}: " + "; ".join(
                f"{kind}: {len(ts)} denied" + (f", the last {ts[-1]:.1f} s after" if ts else "")
                for kind, ts in denied.items()), flush=True)
    finally:
        for b in burners:
            b.kill()
            b.wait()
        cp.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
