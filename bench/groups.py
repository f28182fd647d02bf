"""Group placement rate: JobSets placed by the pod binding as one pod group against
GPUWorkload gangs of the same shape, in the same run, on one local control plane
(hack/testenv), the same kwok nodes and one manager process.

    python -m bench.groups [--units 20] [--members 4] [--gpus 2] [--nodes 20] [--order ...]

- the control plane, our CRDs and policies (``config``), the real JobSet v0.12.0
  controller (``hack/testenv/peers.sh``, its webhooks on 127.0.0.1, as the pod-group
  tests start it) and ``python main.py manager --enable-pod-binding``;
- ``--nodes`` kwok nodes of 8 GPUs labelled
  ``gpu.orchestrator.dev/device-authority=named`` (a group's members go only there),
  room for every unit of a phase at once;
- per phase (``--order``, default jobset then gpuworkload), ``--units`` units created
  back to back: a JobSet of ``--members`` Jobs of one pod asking ``--gpus``
  ``nvidia.com/gpu`` (``schedulerName: gpu-scheduler``), or a GPUWorkload of
  ``--members`` replicas x ``--gpus`` GPUs; a unit's time is from just before its
  create to the first poll (every 50 ms) that sees all its members bound
  (``spec.nodeName``), and from the first poll that sees all its members made (by
  the JobSet and Job controllers; a GPUWorkload's pods are made bound) to bound;
  then every unit is deleted and the phase waits for its pods to go.

Prints one JSON line per phase (p50, p95, max, the phase's makespan from the first
create to the last unit bound, units per second) and the load average; the machine's
load is part of the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL, WORKLOAD_LABEL
from api.v1alpha1.types import API_VERSION
from hack.testenv import ControlPlane
from hack.testenv.process import stop_child
from runtime import Client, NotFound
from tests.integration.podgroups.controllers import JOBSET, PeerController, gpu_pod, jobset

ROOT = Path(__file__).resolve().parent.parent
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
NS = "bench-groups"


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _jobset(name: str, members: int, gpus: int) -> dict[str, Any]:
    js = jobset(name, [("workers", members, 1)])
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = 0
    pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    return js


def _gpuworkload(name: str, members: int, gpus: int) -> dict[str, Any]:
    template = gpu_pod(gpus)
    template["spec"].pop("schedulerName")
    template["spec"]["containers"][0].pop("resources")
    template["spec"]["terminationGracePeriodSeconds"] = 0
    return {"apiVersion": API_VERSION, "kind": "GPUWorkload", "metadata": {"name": name},
            "spec": {"replicas": members, "gpusPerReplica": gpus, "workloadKind": "Pod",
                     "template": template}}


def _unit_of(kind: str, pod: dict[str, Any]) -> str | None:
    labels = pod["metadata"].get("labels") or {}
    return labels.get(JOBSET_LABEL if kind == "jobset" else WORKLOAD_LABEL)


def phase(admin: Client, kind: str, units: int, members: int, gpus: int,
          prefix: str = "") -> dict[str, Any]:
    names = [f"{prefix}{kind[:2]}{i}" for i in range(units)]
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    made: dict[str, float] = {}  # when all its members were first seen (bound or not)
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            now = time.monotonic()
            counts: dict[str, int] = {}
            exist: dict[str, int] = {}
            for p in admin.list("v1", "Pod", namespace=NS)["items"]:
                unit = _unit_of(kind, p)
                if unit and not p["metadata"].get("deletionTimestamp"):
                    exist[unit] = exist.get(unit, 0) + 1
                    if p["spec"].get("nodeName"):
                        counts[unit] = counts.get(unit, 0) + 1
            for unit, n in exist.items():
                if n >= members and unit in created and unit not in made:
                    made[unit] = now
            for unit, n in counts.items():
                if n >= members and unit in created and unit not in bound:
                    bound[unit] = now
            if len(bound) == units:
                done.set()
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    for name in names:
        obj = _jobset(name, members, gpus) if kind == "jobset" else \
            _gpuworkload(name, members, gpus)
        created[name] = time.monotonic()
        admin.create(obj, namespace=NS)
    done.wait(300)
    done.set()
    poller.join(10)
    times = sorted(bound[n] - created[n] for n in names if n in bound)
    first = min(created.values())
    # from all members seen to all bound (for ours the pods are made bound: 0)
    placing = sorted(bound[n] - made.get(n, bound[n]) for n in names if n in bound)
    out = {"kind": kind, "units": units, "shape": f"{members} x {gpus} GPUs",
           "bound": len(times),
           "p50_s": round(statistics.median(times), 3) if times else None,
           "p95_s": round(times[max(0, int(len(times) * 0.95) - 1)], 3) if times else None,
           "max_s": round(times[-1], 3) if times else None,
           "members_made_to_bound_p50_s": round(statistics.median(placing), 3)
           if placing else None,
           "makespan_s": round(max(bound.values()) - first, 3) if bound else None,
           "load": _loadavg()}
    out["units_per_s"] = round(len(times) / out["makespan_s"], 2) if out["makespan_s"] else None
    for name in names:  # everything goes before the next phase
        try:
            if kind == "jobset":
                admin.delete(JOBSET_API, "JobSet", name, NS, propagation_policy="Background")
            else:
                admin.delete(API_VERSION, "GPUWorkload", name, namespace=NS)
        except NotFound:
            pass
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (
            admin.list("v1", "Pod", namespace=NS)["items"] or
            admin.list(API_VERSION, "GPUWorkload", namespace=NS)["items"]):
        time.sleep(0.5)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.groups", description=__doc__.split("\n")[0])
    ap.add_argument("--units", type=int, default=20)
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--order", default="jobset,gpuworkload",
                    help="the phases, comma-separated (jobset, gpuworkload); repeat to alternate")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as work:
        cp = ControlPlane(Path(work), nodes=0, gpus=8)
        cp.start()
        manager: subprocess.Popen[bytes] | None = None
        peer: PeerController | None = None
        try:
            cp.kubectl("apply", "-k", str(ROOT / "config"))
            cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                       "crd/gpuworkloads.gpu.orchestrator.dev")
            cp.create_nodes([f"bench-node-{i}" for i in range(args.nodes)], 8,
                            labels={DEVICE_AUTHORITY_LABEL: "named"})
            peer = PeerController(cp, JOBSET).start()
            admin = Client.from_kubeconfig(str(cp.kubeconfig))
            admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            log = open(Path(work) / "manager.log", "ab")  # noqa: SIM115 (closed below)
            manager = subprocess.Popen(
                [sys.executable, str(ROOT / "main.py"), "manager", "--enable-pod-binding",
                 "--kubeconfig", str(cp.kubeconfig), "--metrics-bind-address", "0",
                 "--health-probe-bind-address", "0", "--log-level", "warning",
                 "--workers", "4", "--qps", "200", "--burst", "400"],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            log.close()
            # a warm-up unit of each kind (the manager's caches synced, JobSet's webhook up)
            for kind in ("jobset", "gpuworkload"):
                phase(admin, kind, 1, args.members, args.gpus, prefix="warm-")
            for i, kind in enumerate(args.order.split(",")):
                print(json.dumps(phase(admin, kind.strip(), args.units, args.members,
                                       args.gpus, prefix=f"r{i}-")), flush=True)
        finally:
            if manager is not None:
                stop_child(manager)
            if peer is not None:
                peer.stop()
            cp.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
