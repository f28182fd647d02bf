"""End-to-end: kube-scheduler against the GPUWorkload controller on one local
control plane (hack/testenv), same kwok nodes, one system at a time.

Per size (N nodes x G GPUs), for each system in turn:

- a fresh process of the system (kube-scheduler, or ``python main.py manager``), a
  one-unit warm-up, then
- burst: ``units`` created as fast as ``--clients`` connections allow;
- steady: ``rate`` units/s for ``duration`` seconds;
- after each phase: every unit's bound time, the process's CPU and peak RSS, the
  API requests of the window (audit log, by User-Agent), the no-double-booking check,
  then the namespace is emptied (grace 0) so the next phase starts from a free cluster.

A unit is a Pod requesting ``nvidia.com/gpu: 1`` (baseline), a ``batch/v1`` Job of one
such pod (the job controller creates it, kube-scheduler binds it: the second
baseline) or a one-GPU Pod-mode GPUWorkload (ours). For ours, one more burst kills
the controller with SIGKILL a third of the way through and starts it again; the
double-booking check then runs over the pods' devices and the placements. Bound: the
pod is first seen (watch, in this process) with ``spec.nodeName``; for ours that is
the child pod's ADDED event, since the controller creates it bound. Latency: the time
just before this process sent the create, to that.
"""

from __future__ import annotations

import collections
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.kube import Api, Creator, proc_stats
from hack.testenv.controlplane import ControlPlane, free_port
from hack.testenv.process import Process

ROOT = Path(__file__).resolve().parent.parent
GROUP = "gpu.orchestrator.dev"
VERSION = "v1alpha1"
SCHEDULER = "kube-scheduler"
JOBS = "kube-scheduler-jobs"  # a batch/v1 Job per unit, its pod bound by kube-scheduler
OURS = "gpu-orchestrator"
OURS_QUEUE = "gpu-orchestrator-queue"  # ours with one GPUQueue over the whole cluster
KUEUE = "kueue"  # Kueue admits suspended Jobs, kube-scheduler binds (bench/kueue.py)
QUEUE_ALL = "bench-all"  # OURS_QUEUE's GPUQueue: every namespace, the cluster's GPUs
DEVICES_ANNOTATION = f"{GROUP}/devices"
FINALIZER = f"{GROUP}/children"
NODE_PREFIX = "bench-node-"

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
"""

#: kube-apiserver 1.34 serves MutatingAdmissionPolicy (beta) only with these
MUTATING_ADMISSION_POLICY = ("--feature-gates=MutatingAdmissionPolicy=true",
                             "--runtime-config=admissionregistration.k8s.io/v1beta1=true")

Progress = Callable[[str], None]


class BenchPlane(ControlPlane):
    """The test control plane with an audit log (who sent which request) and a
    kube-scheduler that the benchmark starts and stops itself, once per size."""

    check_pods = False  # no check-service runner decoding every pod event meanwhile

    def _apiserver_argv(self) -> list[str]:
        policy = self.dir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        self.audit_log = self.dir / "audit.log"
        # maxsize in MB: never rotate (0 would mean lumberjack's default of 100)
        return [*super()._apiserver_argv(), f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}", "--audit-log-maxsize=1000000",
                "--audit-log-format=json", *MUTATING_ADMISSION_POLICY]

    #: the client limits of kube-controller-manager (its job controller creates the Job
    #: baseline's pods): the benchmark's --qps/--api-burst, like the other systems'
    kcm_qps: float | None = None
    kcm_burst: int | None = None

    def _start_component(self, name: str, certs: str, *flags: str) -> None:
        if name == "kube-controller-manager":
            flags = (*flags, *([f"--kube-api-qps={self.kcm_qps}"] if self.kcm_qps else []),
                     *([f"--kube-api-burst={self.kcm_burst}"] if self.kcm_burst else []))
        super()._start_component(name, certs, *flags)

    def start_scheduler(self, qps: float | None, burst: int | None) -> int:
        port = free_port()
        argv = [
            str(self.bin / "kube-scheduler"),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={self.dir / 'scheduler-certs'}",
            "--leader-elect=false", "--v=1",
        ]
        if qps:
            argv.append(f"--kube-api-qps={qps}")
        if burst:
            argv.append(f"--kube-api-burst={burst}")
        proc = self._spawn(SCHEDULER, argv)
        proc.wait_ready(self._healthz_probe(port), 60)
        return proc.pid  # type: ignore[return-value]

    def stop_process(self, name: str) -> None:
        proc = self.processes.pop(name, None)
        if proc is not None:
            proc.stop()


# --------------------------------------------------------------------------- units


@dataclass
class System:
    name: str
    resource_path: str  # collection path with {ns}
    build: Callable[[str, str], dict]  # (namespace, name) -> manifest
    unit_of_pod: Callable[[dict], str | None]


def _pod(ns: str, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"bench": "unit"}},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox:1.36",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def _workload(ns: str, name: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUWorkload",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"gpusPerReplica": 1, "workloadKind": "Pod",
                     "template": {"spec": {"terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "main",
                                                           "image": "busybox:1.36"}]}}}}


def _job(ns: str, name: str) -> dict:
    pod = _pod(ns, name)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1,
                     "template": {"metadata": {"labels": {"bench": "unit"}},
                                  "spec": pod["spec"]}}}


def _name(pod: dict) -> str:
    return pod["metadata"]["name"]


def _job_of(pod: dict) -> str | None:
    labels = pod["metadata"].get("labels") or {}
    return labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")


def _workload_of(pod: dict) -> str | None:
    name = _name(pod)
    return name[:-2] if name.endswith("-0") else None


BASELINE = System(SCHEDULER, "/api/v1/namespaces/{ns}/pods", _pod, _name)
JOB_BASELINE = System(JOBS, "/apis/batch/v1/namespaces/{ns}/jobs", _job, _job_of)
OURS_SYSTEM = System(OURS, f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/gpuworkloads", _workload,
                     _workload_of)
OURS_QUEUE_SYSTEM = System(OURS_QUEUE, OURS_SYSTEM.resource_path, _workload, _workload_of)


def _kueue_job(ns: str, name: str) -> dict:
    from bench import kueue
    return kueue.job(ns, name, _pod(ns, name)["spec"])


KUEUE_SYSTEM = System(KUEUE, JOB_BASELINE.resource_path, _kueue_job, _job_of)
SYSTEMS = {SCHEDULER: BASELINE, JOBS: JOB_BASELINE, OURS: OURS_SYSTEM,
           OURS_QUEUE: OURS_QUEUE_SYSTEM, KUEUE: KUEUE_SYSTEM}
TAGS = {SCHEDULER: "s", JOBS: "j", OURS: "o", OURS_QUEUE: "q", KUEUE: "k"}


def is_ours(name: str) -> bool:
    return name in (OURS, OURS_QUEUE)


def _queue_all(capacity: int) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUQueue",
            "metadata": {"name": QUEUE_ALL},
            "spec": {"nominalGPUs": capacity, "namespaceSelector": {}}}


class Tracker:
    """Fed by the pod watch of a phase's namespace: when each unit was first seen
    bound, and Running."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.node: dict[str, str] = {}

    def handle(self, typ: str, pod: dict, t: float) -> None:
        if typ not in ("ADDED", "MODIFIED"):
            return
        unit = self.system.unit_of_pod(pod)
        if unit is None:
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if node and unit not in self.bound:
            self.bound[unit] = t
            self.node[unit] = node
        if (pod.get("status") or {}).get("phase") == "Running" and unit not in self.running:
            self.running[unit] = t


# --------------------------------------------------------------------------- the run


@dataclass
class Config:
    sizes: list[int]
    bursts: list[int]
    gpus: int = 8
    rate: float = 50.0
    duration: float = 10.0
    clients: int = 8
    workers: int | None = None  # None: the controller's default
    qps: float | None = None  # None: each system's default (50, burst 100)
    api_burst: int | None = None
    systems: list[str] = field(default_factory=lambda: [SCHEDULER, OURS])
    #: ours gets its finalizer from config/admission-finalizer (a MutatingAdmission-
    #: Policy; the bench's kube-apiserver serves the API); False: the controller's patch
    finalizer_policy: bool = True
    controller_env: dict[str, str] = field(default_factory=dict)
    kill_burst: bool = True  # ours: one more burst with a kill -9 of the controller in it
    static_nodes: bool = False  # BENCHMARK-ONLY nodes (see ControlPlane.static_nodes)


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _metrics_total(api: Api) -> float:
    total = 0.0
    for line in api.text("/metrics").splitlines():
        if line.startswith("apiserver_request_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _client_class(ua: str) -> str:
    ua = ua or ""
    for prefix, name in (("kube-scheduler", SCHEDULER), ("runtime-client", OURS),
                         ("kueue", KUEUE),
                         ("gpu-bench", "bench"), ("kwok", "kwok"),
                         ("kube-controller-manager", "kube-controller-manager"),
                         ("kube-apiserver", "kube-apiserver")):
        if ua.startswith(prefix):
            return name
    return "other"


def audit_counts(path: Path, start: int, end: int) -> dict[str, Any]:
    """Requests completed in the audit log between byte offsets, by client, and the
    verbs/resources of each client."""
    by_client: collections.Counter[str] = collections.Counter()
    watches: collections.Counter[str] = collections.Counter()
    detail: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    with open(path, "rb") as f:
        f.seek(start)
        lines = _lines(f, end - start)
        for line in lines:
            try:
                ev = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            who = _client_class(ev.get("userAgent", ""))
            verb = ev.get("verb", "?")
            if verb == "watch":
                watches[who] += 1
                continue
            by_client[who] += 1
            ref = ev.get("objectRef") or {}
            res = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource")
                                              else "")
            detail[who][f"{verb} {res}"] += 1
    return {"requests": dict(by_client), "watches": dict(watches),
            "detail": {k: dict(v.most_common()) for k, v in detail.items()}}


def _lines(f: Any, size: int) -> Any:
    """The lines of the next ``size`` bytes of ``f``, read in blocks."""
    rest = b""
    while size > 0:
        block = f.read(min(size, 1 << 20))
        if not block:
            break
        size -= len(block)
        parts = (rest + block).split(b"\n")
        rest = parts.pop()
        yield from parts
    if rest:
        yield rest


class Bench:
    def __init__(self, cp: BenchPlane, cfg: Config, progress: Progress,
                 save: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        self.cp, self.cfg, self.progress = cp, cfg, progress
        self.save = save or (lambda results: None)
        self.api = Api(cp.ports["apiserver"], cp.ssl_context())
        self.nodes: list[str] = []
        self.controller: Process | None = None
        self.metrics_port: int | None = None
        self.profiler: Any = None
        # the kube-apiserver's own profile (--apiserver-profile): each system's burst at
        # the size of the largest burst (bench/apiserver_profile.py)
        self.apiserver_profiler: Any = None
        self.kueue: Any = None  # bench.kueue.Kueue, made on its first start
        # py-spy (--profile): ours' burst and steady phase at the size of the largest burst
        self.profile_nodes = cfg.sizes[max(range(len(cfg.sizes)), key=lambda i: cfg.bursts[i])]

    # ---------------------------------------------------------------- setup

    def install_crds(self) -> None:
        self.cp.kubectl("apply", "-k", str(ROOT / "config" / "crd"))
        self.cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                        f"crd/gpuworkloads.{GROUP}", f"crd/gpunodes.{GROUP}")
        if self.cfg.finalizer_policy:
            self.install_finalizer_policy()

    def install_finalizer_policy(self) -> None:
        """config/admission-finalizer, and a wait until it is in force."""
        self.cp.kubectl("apply", "-k", str(ROOT / "config" / "admission-finalizer"))
        # in force once kube-apiserver loaded it: a dry-run create shows it
        deadline = time.time() + 60
        path = OURS_SYSTEM.resource_path.format(ns="default") + "?dryRun=All"
        while True:
            code, out = self.api.request("POST", path, _workload("default", "probe"))
            if code == 201 and FINALIZER in (out["metadata"].get("finalizers") or ()):
                return
            if time.time() > deadline:
                raise RuntimeError("config/admission-finalizer not in force after 60s")
            time.sleep(0.5)

    def ensure_nodes(self, n: int) -> None:
        if len(self.nodes) >= n:
            return
        t0 = time.time()
        names = [f"{NODE_PREFIX}{i:05d}" for i in range(len(self.nodes), n)]
        creator = Creator(self.api, self.cfg.clients)
        for name in names:
            creator.submit("/api/v1/nodes", self.cp.node_manifest(name, self.cfg.gpus), name)
        deadline = time.time() + 120 + n / 5
        while time.time() < deadline:
            ready = self._ready_nodes()
            self.progress(f"nodes: {len(creator.done)}/{len(names)} created, "
                          f"{ready}/{n} Ready and untainted")
            if ready >= n:
                break
            time.sleep(2)
        creator.close()
        if creator.errors:
            raise RuntimeError(f"creating nodes: {creator.errors[:3]}")
        if self._ready_nodes() < n:
            raise RuntimeError(f"only {self._ready_nodes()} of {n} nodes became Ready")
        self.nodes += names
        self.progress(f"nodes: {n} Ready in {time.time() - t0:.0f}s")

    def _ready_nodes(self) -> int:
        out = self.api.must("GET", "/api/v1/nodes?labelSelector=type%3Dkwok")
        count = 0
        for node in out["items"]:
            if not node["metadata"]["name"].startswith(NODE_PREFIX):
                continue
            conds = (node.get("status") or {}).get("conditions") or []
            taints = (node.get("spec") or {}).get("taints") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conds) and \
                    not any(t["key"].startswith("node.kubernetes.io/") for t in taints):
                count += 1
        return count

    # ---------------------------------------------------------------- systems

    def start(self, system: str) -> int:
        if system in (SCHEDULER, JOBS):
            return self.cp.start_scheduler(self.cfg.qps, self.cfg.api_burst)
        if system == KUEUE:
            from bench.kueue import Kueue
            self.cp.start_scheduler(self.cfg.qps, self.cfg.api_burst)
            if self.kueue is None:
                self.kueue = Kueue(self.cp, qps=self.cfg.qps, burst=self.cfg.api_burst)
            pid = self.kueue.start()
            self.kueue.set_quota(len(self.nodes) * self.cfg.gpus)
            return pid
        if system == OURS_QUEUE:
            self.api.must("POST", f"/apis/{GROUP}/{VERSION}/gpuqueues",
                          _queue_all(len(self.nodes) * self.cfg.gpus))
        health, metrics = free_port(), free_port()
        argv = [sys.executable, str(ROOT / "main.py"), "manager",
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--metrics-bind-address=127.0.0.1:{metrics}",
                # the benchmark reads the status writer's series over plain HTTP on
                # loopback (the secure default needs a token it does not have)
                "--no-metrics-secure",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                "--log-format=console",
                # as kube-scheduler here: one instance, and a kill -9 restart must not
                # wait out the previous process's Lease
                "--leader-elect=false"]
        if self.cfg.workers:
            argv.append(f"--workers={self.cfg.workers}")
        if self.cfg.qps:
            argv.append(f"--qps={self.cfg.qps}")
        if self.cfg.api_burst:
            argv.append(f"--burst={self.cfg.api_burst}")
        proc = Process(OURS, argv, self.cp.dir / "logs" / f"{OURS}.log")
        self.metrics_port = metrics
        env_before = {k: os.environ.get(k) for k in self.cfg.controller_env}
        os.environ.update(self.cfg.controller_env)
        try:
            proc.start()
        finally:
            for k, v in env_before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.controller = proc
        proc.wait_ready(lambda: self.cp._http("GET", health, "/readyz")[0] == 200, 60)
        return proc.pid  # type: ignore[return-value]

    def stop(self, system: str) -> None:
        if system in (SCHEDULER, JOBS, KUEUE):
            self.cp.stop_process(SCHEDULER)
        if system == KUEUE and self.kueue is not None:
            self.kueue.stop()
        elif self.controller is not None:
            self.controller.stop(grace=20)
            self.controller = None
        if system == OURS_QUEUE:
            self.api.request("DELETE", f"/apis/{GROUP}/{VERSION}/gpuqueues/{QUEUE_ALL}")

    def others(self, pid: int) -> dict[str, int]:
        """The control plane's processes other than the measured one (with Kueue,
        kube-scheduler is one of them: its CPU is in the control plane's columns)."""
        return {n: p for n, p in self.cp.pids().items() if p != pid}

    # ---------------------------------------------------------------- phases

    def _namespace(self, ns: str, system: System | None = None) -> None:
        """The phase's namespace, usable for pods; with Kueue, its LocalQueue, active."""
        self.api.must("POST", "/api/v1/namespaces",
                      {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        deadline = time.time() + 60
        while time.time() < deadline:
            code, _ = self.api.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")
            if code == 200:
                break
            time.sleep(0.2)
        if system is not None and system.name == KUEUE:
            self.kueue.local_queue(ns)

    def _empty(self, ns: str, system: System) -> None:
        """Deletes the phase's units and pods at once (grace 0) and the namespace, and
        waits until the namespace is gone: the next phase starts on a control plane
        that is not still deleting this one's Events and, for ours, looking up the
        deleted workloads that owned its pods (the garbage collector's GETs), work
        that otherwise fell into the next phase's measured window."""
        if is_ours(system.name):
            self.api.request("DELETE", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/gpuworkloads")
        if system.name in (JOBS, KUEUE):
            self.api.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs",
                             {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                              "propagationPolicy": "Background"})
        self.api.request("DELETE", f"/api/v1/namespaces/{ns}/pods",
                         {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
        deadline = time.time() + 300
        while time.time() < deadline:
            out = self.api.must("GET", f"/api/v1/namespaces/{ns}/pods?limit=1")
            if not out["items"]:
                break
            self.api.request("DELETE", f"/api/v1/namespaces/{ns}/pods",
                             {"apiVersion": "v1", "kind": "DeleteOptions",
                              "gracePeriodSeconds": 0})
            time.sleep(1)
        # Ours: the workloads go once the controller removed its finalizer, which it
        # does on its workers' client; the next phase starts after that (a cleanup
        # that overlaps it would queue its creates behind the finalizer removals).
        while is_ours(system.name) and time.time() < deadline:
            out = self.api.must("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/gpuworkloads"
                                "?limit=1")
            if not out["items"]:
                break
            time.sleep(0.5)
        self.api.request("DELETE", f"/api/v1/namespaces/{ns}")
        while time.time() < deadline:
            code, _ = self.api.request("GET", f"/api/v1/namespaces/{ns}")
            if code == 404:
                break
            time.sleep(0.5)

    def warm_up(self, system: System, tag: str) -> None:
        ns = f"warm-{tag}"
        self._namespace(ns, system)
        tracker = Tracker(system)
        watch = self.api.watch(f"/api/v1/namespaces/{ns}/pods", tracker.handle)
        try:
            self.api.must("POST", system.resource_path.format(ns=ns), system.build(ns, "warm"))
            deadline = time.time() + 120
            while "warm" not in tracker.bound and time.time() < deadline:
                time.sleep(0.05)
            if "warm" not in tracker.bound:
                raise RuntimeError(f"{system.name}: the warm-up unit was not bound in 120s")
        finally:
            watch.stop()
            self._empty(ns, system)

    def phase(self, system: System, pid: int, kind: str, ns: str, units: int,
              rate: float | None, kill_at: int | None = None) -> dict[str, Any]:
        """One phase; with ``kill_at`` the controller is killed (SIGKILL) once that many
        units are bound and started again at once."""
        self._namespace(ns, system)
        tracker = Tracker(system)
        watch = self.api.watch(f"/api/v1/namespaces/{ns}/pods", tracker.handle)
        creator = Creator(self.api, self.cfg.clients)
        names = [f"u-{i:05d}" for i in range(units)]
        path = system.resource_path.format(ns=ns)
        others = self.others(pid)
        before = {"proc": proc_stats(pid), "others": {n: proc_stats(p)["cpu_s"]
                                                      for n, p in others.items()},
                  "audit": self.cp.audit_log.stat().st_size, "metrics": _metrics_total(self.api)}
        foreign_before = foreign_apiservers(self.cp.pids().get("kube-apiserver"))
        writer_before = self._writer_metrics() if is_ours(system.name) else {}
        profiling = kind in ("burst", "steady") and self.profiler is not None and \
            is_ours(system.name) and len(self.nodes) == self.profile_nodes
        if profiling:
            self.profiler.start(pid, kind)
        recording = kind == "burst" and self.apiserver_profiler is not None and \
            len(self.nodes) == self.profile_nodes
        if recording:
            self.apiserver_profiler.start(system.name, kind)
        stop = threading.Event()
        t_start = time.time()
        if rate:
            creator.run_rate([(path, system.build(ns, n), n) for n in names], rate, stop)
        else:
            for n in names:
                creator.submit(path, system.build(ns, n), n)
        timeout = 120 + units / 5 + (units / rate if rate else 0)
        deadline = time.time() + timeout
        last = 0.0
        killed: dict[str, Any] = {}
        try:
            while len(tracker.bound) < units and time.time() < deadline:
                if len(creator.errors) > 0 and len(creator.done) + len(creator.errors) >= units:
                    break
                time.sleep(0.05)
                if kill_at is not None and not killed and len(tracker.bound) >= kill_at:
                    killed = self._kill_and_restart(pid, len(tracker.bound))
                    pid = killed["new_pid"]
                if time.time() - last >= 2:
                    last = time.time()
                    self.progress(f"  {system.name:>16} {kind:>6} {len(self.nodes):>5} nodes: "
                                  f"created {len(creator.done):>6}/{units}  "
                                  f"bound {len(tracker.bound):>6}/{units}  "
                                  f"({time.time() - t_start:5.1f}s)")
            t_bound = max(tracker.bound.values(), default=time.time())
            # Quiescence: every unit Running (kwok), then the system's CPU idle, so the
            # window holds all of its follow-up requests (e.g. our Running status).
            q_deadline = time.time() + 60 + units / 50
            while len(tracker.running) < len(tracker.bound) and time.time() < q_deadline:
                time.sleep(0.2)
            cpu = proc_stats(pid)["cpu_s"]
            while time.time() < q_deadline:
                time.sleep(1.0)
                now = proc_stats(pid)["cpu_s"]
                if now - cpu < 0.03:
                    break
                cpu = now
        finally:
            stop.set()
            if profiling:
                self.profiler.stop()
            if recording:
                self.apiserver_profiler.stop()
            watch.stop()
            creator.close()
        after = {"proc": proc_stats(pid), "others": {n: proc_stats(p)["cpu_s"]
                                                     for n, p in others.items()},
                 "audit": self.cp.audit_log.stat().st_size, "metrics": _metrics_total(self.api)}
        writer = (_writer_delta(writer_before, self._writer_metrics())
                  if is_ours(system.name) and not killed else None)
        check = self.check(system, ns)
        self._empty(ns, system)

        bound = tracker.bound
        lat = [bound[u] - creator.sent[u] for u in bound if u in creator.sent]
        first = min(creator.sent.values(), default=t_start)
        audit = audit_counts(self.cp.audit_log, before["audit"], after["audit"])
        own = audit["requests"].get(OURS if is_ours(system.name) else system.name, 0)
        if system.name in (JOBS, KUEUE):  # the job controller's pod creates and
            own = audit["requests"].get(SCHEDULER, 0) + \
                audit["requests"].get("kube-controller-manager", 0) + \
                audit["requests"].get(KUEUE, 0)  # kube-scheduler's Bindings are the unit's
        total = sum(audit["requests"].values())
        elapsed = t_bound - first
        last_create = max(creator.done.values(), default=first)
        curve = sorted(t - first for t in bound.values())
        row = {
            "units": units, "bound": len(bound), "complete": len(bound) == units,
            "create_errors": creator.errors[:5], "create_error_count": len(creator.errors),
            "rate_per_s": rate,
            "seconds_first_create_to_last_bound": round(elapsed, 3),
            "seconds_creating": round(last_create - first, 3),
            "throughput_per_s": round(len(bound) / elapsed, 1) if elapsed > 0 else None,
            "latency_p50_s": _round(_pct(lat, 0.50)), "latency_p99_s": _round(_pct(lat, 0.99)),
            "latency_max_s": _round(max(lat, default=None)),
            "cpu_s": round(after["proc"]["cpu_s"] - (0 if killed else before["proc"]["cpu_s"]),
                           2),
            "killed": killed or None,
            "ctx_switches_per_unit": None if killed or not units else {
                k: round((after["proc"][k] - before["proc"][k]) / units, 1)
                for k in ("ctx_voluntary", "ctx_involuntary")},
            "peak_rss_mib": after["proc"]["peak_rss_mib"],
            "rss_mib": after["proc"]["rss_mib"],
            "cpu_s_control_plane": {n: round(after["others"][n] - before["others"][n], 2)
                                    for n in others},
            "api_requests_own": own,
            "api_requests_per_unit_own": round(own / units, 2) if units else None,
            "api_requests_all_clients": total,
            "api_requests_per_unit_all": round(total / units, 2) if units else None,
            "apiserver_request_total_delta": round(after["metrics"] - before["metrics"]),
            "audit": audit,
            "double_booking": check,
            "status_writer": writer,
            "watch_reconnects": watch.reconnects, "watch_relists": watch.relists,
            "loadavg_after": _loadavg(),
            "foreign_apiservers": sorted({foreign_before,
                                          foreign_apiservers(self.cp.pids().get("kube-apiserver"))}),
            "bound_curve_s": [round(x, 3) for x in curve],
        }
        self.progress(
            f"  {system.name:>16} {kind:>6} {len(self.nodes):>5} nodes: {len(bound)}/{units} "
            f"bound in {elapsed:.1f}s -> {row['throughput_per_s']}/s, p50 "
            f"{_ms(row['latency_p50_s'])} p99 {_ms(row['latency_p99_s'])}, "
            f"{row['api_requests_per_unit_own']} req/unit, cpu {row['cpu_s']}s, "
            f"peak rss {row['peak_rss_mib']} MiB, double-booked: {check['violations']}"
            + (f", context switches/unit {ctx['ctx_voluntary']} voluntary "
               f"{ctx['ctx_involuntary']} involuntary"
               if (ctx := row["ctx_switches_per_unit"]) else ""))
        return row

    def _writer_metrics(self) -> dict[str, float]:
        """The controller's status-writer, event and decision series (cumulative: the
        decisions made and those made again because their inputs changed meanwhile)."""
        if self.metrics_port is None:
            return {}
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        except OSError as exc:
            self.progress(f"  could not read the controller's /metrics: {exc}")
            return {}
        finally:
            conn.close()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(("gpu_orchestrator_status_write", "events_dropped_total",
                                "gpu_orchestrator_child_creates_total",
                                "gpu_orchestrator_stale_decisions_total",
                                "gpu_orchestrator_scheduling_attempts_total",
                                "controller_runtime_reconcile_total", "workqueue_adds_total")):
                name, _, v = line.rpartition(" ")
                out[name] = float(v)
        return out

    def _kill_and_restart(self, pid: int, bound: int) -> dict[str, Any]:
        import signal
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        if self.controller is not None:
            self.controller.stop(grace=0)  # reaps the killed process
            self.controller = None
        new = self.start(OURS)
        self.progress(f"  killed the controller (pid {pid}) with SIGKILL at {bound} bound; "
                      f"pid {new} ready in {time.time() - t0:.1f}s")
        return {"at_bound": bound, "old_pid": pid, "new_pid": new,
                "restart_ready_s": round(time.time() - t0, 2)}

    def check(self, system: System, ns: str) -> dict[str, Any]:
        """No device given twice. Ours: the (node, device) pairs of every placement,
        and of every pod's devices annotation, are distinct and within the node's
        GPUs, and each placement is its pod's. kube-scheduler names no devices: the
        ``nvidia.com/gpu`` requests per node stay within capacity."""
        per_node: collections.Counter[str] = collections.Counter()
        violations: list[str] = []
        if is_ours(system.name):
            pods = self.api.must("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
            held: dict[tuple[str, int], str] = {}
            pod_devices: dict[str, tuple[str, list[int]]] = {}
            for pod in pods:
                meta = pod["metadata"]
                node = (pod.get("spec") or {}).get("nodeName")
                ann = (meta.get("annotations") or {}).get(DEVICES_ANNOTATION) or ""
                if not node or not ann or (pod.get("status") or {}).get("phase") in (
                        "Succeeded", "Failed"):
                    continue
                devices = [int(x) for x in ann.split(",") if x.strip()]
                pod_devices[meta["name"]] = (node, devices)
                for d in devices:
                    if (node, d) in held:
                        violations.append(f"pods {held[node, d]} and {meta['name']} both hold "
                                          f"{node}:{d}")
                    held[node, d] = meta["name"]
            out = self.api.must("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/gpuworkloads")
            seen: dict[tuple[str, int], str] = {}
            for w in out["items"]:
                for p in (w.get("status") or {}).get("placements") or ():
                    for d in p.get("devices") or ():
                        key = (p["node"], int(d))
                        if key in seen:
                            violations.append(f"{p['node']}:{d} given to {seen[key]} and "
                                              f"{w['metadata']['name']}")
                        seen[key] = w["metadata"]["name"]
                        if not 0 <= int(d) < self.cfg.gpus:
                            violations.append(f"{p['node']}:{d} does not exist")
                        per_node[p["node"]] += 1
                    pod = pod_devices.get(f"{w['metadata']['name']}-{p.get('index', 0)}")
                    if pod is not None and (pod[0] != p["node"] or
                                            sorted(pod[1]) != sorted(map(int, p["devices"]))):
                        violations.append(f"{w['metadata']['name']}: placement "
                                          f"{p['node']}:{p['devices']} but its pod holds "
                                          f"{pod[0]}:{pod[1]}")
            basis = ("status.placements and pods' devices annotations: (node, device) pairs "
                     "distinct, placement == pod")
        else:
            out = self.api.must("GET", f"/api/v1/namespaces/{ns}/pods")
            for pod in out["items"]:
                node = (pod.get("spec") or {}).get("nodeName")
                if node:
                    per_node[node] += 1
            basis = "bound pods' nvidia.com/gpu per node vs capacity"
        for node, n in per_node.items():
            if n > self.cfg.gpus:
                violations.append(f"{node}: {n} GPUs given, capacity {self.cfg.gpus}")
        if is_ours(system.name):
            per_node.clear()
            for node, _ in held:
                per_node[node] += 1
        return {"basis": basis, "devices_given": sum(per_node.values()),
                "nodes_used": len(per_node), "violations": len(violations),
                "examples": violations[:5]}

    # ---------------------------------------------------------------- driver

    def run(self) -> list[dict[str, Any]]:
        results = []
        systems = SYSTEMS
        for i, n in enumerate(self.cfg.sizes):
            self.ensure_nodes(n)
            capacity = n * self.cfg.gpus
            burst = min(self.cfg.bursts[i], capacity)
            steady = min(int(self.cfg.rate * self.cfg.duration), capacity)
            entry: dict[str, Any] = {"nodes": n, "gpus_per_node": self.cfg.gpus,
                                     "capacity": capacity, "burst_requested": self.cfg.bursts[i],
                                     "burst_units": burst, "steady_units": steady,
                                     "systems": {}}
            self.progress(f"size {n} nodes x {self.cfg.gpus} GPUs: burst {burst} units"
                          f"{' (capped at capacity)' if burst < self.cfg.bursts[i] else ''}, "
                          f"steady {self.cfg.rate:g}/s x {self.cfg.duration:g}s = {steady}")
            for name in self.cfg.systems:
                system = systems[name]
                t0 = time.time()
                pid = self.start(name)
                started = proc_stats(pid)
                try:
                    self.progress(f"  {name}: pid {pid} ready in {time.time() - t0:.1f}s; "
                                  f"warm-up")
                    tag = f"{TAGS[name]}{n}"
                    self.warm_up(system, tag)
                    res: dict[str, Any] = {"pid_start": started}
                    if burst:
                        res["burst"] = self.phase(system, pid, "burst", f"burst-{tag}",
                                                  burst, None)
                    entry["systems"][name] = res
                    self.save([*results, entry])
                    if steady:
                        res["steady"] = self.phase(system, pid, "steady", f"steady-{tag}",
                                                   steady, self.cfg.rate)
                    end = proc_stats(pid)
                    if burst and name == OURS and self.cfg.kill_burst and i == 0:
                        res["burst_kill9"] = self.phase(system, pid, "kill9", f"kill-{tag}",
                                                        burst, None, kill_at=burst // 3)
                    res["process"] = {"peak_rss_mib": end["peak_rss_mib"],
                                      "cpu_s_total": round(end["cpu_s"], 2),
                                      "cpu_s_startup_and_warmup":
                                          round(started["cpu_s"], 2)}
                    self.save([*results, entry])
                finally:
                    self.stop(name)
            results.append(entry)
        return results


def _writer_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The status writer over one phase: writes by result, coalesced, child creates by
    result, and the lag (from the histogram's buckets: p50, p99, the largest bucket)."""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    lag = "gpu_orchestrator_status_write_lag_seconds"
    buckets = sorted((float(k.split('le="')[1].split('"')[0]), v) for k, v in d.items()
                     if k.startswith(lag + "_bucket") and 'le="+Inf"' not in k)
    count = d.get(lag + "_count", 0.0)

    def q(x: float) -> float | None:
        for le, c in buckets:
            if count and c >= x * count:
                return le
        return None
    out: dict[str, Any] = {"writes": count, "lag_mean_s": round(d.get(lag + "_sum", 0.0) / count, 3)
                           if count else None, "lag_p50_le_s": q(0.5), "lag_p99_le_s": q(0.99)}
    for k, v in d.items():
        if not k.startswith(lag) and v:
            out[k] = v
    return out


def foreign_apiservers(own: int | None) -> int:
    """kube-apiservers on this machine that this run did not start (other users'
    tests share the cores: the numbers are noisier then)."""
    count = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == own:
            continue
        try:
            argv0 = (d / "cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            continue
        if argv0.endswith(b"/kube-apiserver"):
            count += 1
    return count


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return ""


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f}ms"


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None
