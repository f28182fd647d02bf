"""The local control plane: real etcd, kube-apiserver, kube-controller-manager,
optionally kube-scheduler, and kwok with fake GPU nodes whose pods a kubelet's
admission checks first (admitter.py), all on 127.0.0.1.

Used by the pytest fixtures (tests/conftest.py), by ``make cluster-up`` and by the
demo and the benchmark. Every process is started by this object and stopped by its
own PID, in reverse order, also on an exception or a signal (see ``signals_stop``).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from . import identities, pki
from .process import Process, StartError

HERE = Path(__file__).resolve().parent
STAGES = HERE / "kwok-stages.yaml"
#: a deleted pod keeps running for its terminationGracePeriodSeconds, at most this
#: long (seconds), as a kubelet keeps it until its containers exit
DEFAULT_GRACE_CAP = 10
PHASE_ANNOTATION = "testenv.gpu-orchestrator.dev/phase"
ADMITTED_ANNOTATION = "testenv.gpu-orchestrator.dev/admitted"
#: the pod-ready stage's selector line that waits for the admitter (kwok-stages.yaml)
ADMITTED_SELECTOR = f"""    - key: '.metadata.annotations["{ADMITTED_ANNOTATION}"]'
      operator: 'In'
      values: ['true']
"""
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_CIDR = "10.0.0.0/24"  # virtual ClusterIPs, never dialed
# kwok hands out pod IPs from 198.18.0.0/16 (RFC 2544 benchmarking space, never routed
# on the Internet; nothing dials a pod IP). Not loopback: EndpointSlice and Endpoints
# validation refuse 127.0.0.0/8, so every Service selecting kwok pods (the gangs'
# headless Services) made the endpoint(slice) controllers retry and warn forever.
POD_CIDR = "198.18.0.1/16"

KCM_CONTROLLERS = ",".join([
    "job-controller", "cronjob-controller", "statefulset-controller", "replicaset-controller",
    "deployment-controller", "daemonset-controller", "garbage-collector-controller",
    "namespace-controller", "serviceaccount-controller", "serviceaccount-token-controller",
    "endpoints-controller", "endpointslice-controller", "pod-garbage-collector-controller",
    "ttl-after-finished-controller", "disruption-controller", "resourcequota-controller",
    "node-lifecycle-controller", "clusterrole-aggregation-controller",
    # makes a pod's ResourceClaims from its templates (pod.status.resourceClaimStatuses),
    # drops a gone pod from a claim's reservedFor, deallocates an unreserved claim that
    # carries resource.kubernetes.io/delete-protection and deletes a generated one
    "resourceclaim-controller",
])


#: Benchmark-only nodes (``ControlPlane(static_nodes=True)``): created Ready, never
#: heartbeating. kwok still runs their pods; no node stage of kwok's matches them.
STATIC_NODE_STAGE = """
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-static
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.metadata.name'
      operator: 'DoesNotExist'
  next: {}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binaries() -> Path:
    """Builds (or finds in the cache) the pinned binaries; returns their directory."""
    override = os.environ.get("TESTENV_BIN_DIR")
    if override:
        return Path(override)
    out = subprocess.run(
        ["bash", str(HERE / "build.sh")], check=True, stdout=subprocess.PIPE, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


class ControlPlane:
    """A local control plane in ``workdir``; ``start()`` then ``stop()``, or ``with``."""

    # Run our check service for gpu-scheduler-check pods (checkpods.py). A subclass
    # that measures (the benchmark) turns it off: it decodes every pod event.
    check_pods = True
    # Admit pods on the fake nodes as a kubelet would (admitter.py): kwok makes a pod
    # Running only once admitted; a pod that does not fit ends Failed with the
    # kubelet's reason. Off: kwok runs every bound pod (``admission_rejections`` is []).
    admit_pods = True

    def __init__(
        self,
        workdir: Path | str,
        *,
        nodes: int = 4,
        gpus: int = 4,
        scheduler: bool = False,
        bin_dir: Path | None = None,
        grace_cap: int = DEFAULT_GRACE_CAP,
        static_nodes: bool = False,
        apiserver_flags: tuple[str, ...] = (),
        api_only: bool = False,
    ):
        self.dir = Path(workdir).resolve()
        self.nodes = nodes
        self.gpus = gpus
        self.with_scheduler = scheduler
        self.bin = bin_dir
        self.grace_cap = grace_cap
        #: BENCHMARK-ONLY: thousands of nodes on two cores. Nodes are created with a
        #: Ready condition in the create body, kube-apiserver runs without the
        #: TaintNodesByCondition admission plugin, kube-controller-manager without the
        #: node-lifecycle controller, kwok without node heartbeats or leases (it still
        #: runs pods). A node that stops answering is never noticed: never for tests.
        self.static_nodes = static_nodes
        #: more kube-apiserver flags (``--runtime-config=resource.k8s.io/v1=false``: a
        #: cluster without DRA)
        self.apiserver_flags = tuple(apiserver_flags)
        #: etcd and kube-apiserver alone: no controller manager, scheduler, kwok, nodes
        #: or check pods (a few seconds to start; for tests of the API side only)
        self.api_only = api_only
        self.processes: dict[str, Process] = {}
        self.ports: dict[str, int] = {}
        #: kube-apiserver was restarted since the last ``caught_up``
        self.restarted = False
        self.kubeconfig = self.dir / "kubeconfig"
        self.server = ""

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> ControlPlane:
        if self.bin is None:
            self.bin = binaries()
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self._pki()
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfigs()
            if self.api_only:
                return self
            self._start_controller_manager()
            if self.with_scheduler:
                self._start_scheduler()
            if self.admit_pods:
                self._start_admitter()
            self._start_kwok()
            if self.check_pods:
                self._start_check_pods()
            self.create_nodes([f"node{i}" for i in range(1, self.nodes + 1)], self.gpus)
            self._wait_default_serviceaccount()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops every process it started, last started first, each by its PID."""
        for name in reversed(list(self.processes)):
            self.processes[name].stop()
        self.processes.clear()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.processes.items() if p.pid is not None}

    # ---- processes -------------------------------------------------------------------

    def _pki(self) -> None:
        d = self.dir / "pki"
        self.ca = pki.CertificateAuthority(d)
        self.serving = self.ca.issue(
            "apiserver", "kube-apiserver", server=True,
            dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ips=("127.0.0.1", "10.0.0.1"),
        )
        self.admin = identities.issue(self.ca, identities.ADMIN)
        self.components = {who.stem: (who, identities.issue(self.ca, who))
                           for who in (identities.CONTROLLER_MANAGER, identities.SCHEDULER)}
        # kwok's kubelet endpoint (logs): kube-apiserver calls it over TLS.
        self.kwok_serving = self.ca.issue("kwok", "kwok", server=True, ips=("127.0.0.1",))
        self.sa = pki.service_account_keys(d)

    def _spawn(self, name: str, argv: list[str]) -> Process:
        proc = Process(name, argv, self.dir / "logs" / f"{name}.log")
        proc.start()
        self.processes[name] = proc
        return proc

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.ports["etcd"] = client
        self.ports["etcd-peer"] = peer
        data = self.dir / "etcd-data"
        proc = self._spawn("etcd", [
            str(self.bin / "etcd"), "--name=testenv", f"--data-dir={data}",
            f"--listen-client-urls=http://127.0.0.1:{client}",
            f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=testenv=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true", "--log-level=warn",
        ])
        proc.wait_ready(lambda: self._http("GET", client, "/health")[0] == 200, 60)

    def _apiserver_argv(self) -> list[str]:
        port = self.ports["apiserver"]
        return [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            "--advertise-address=127.0.0.1",
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            f"--tls-cert-file={self.serving.cert}", f"--tls-private-key-file={self.serving.key}",
            f"--client-ca-file={self.ca.cert_path}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.sa.cert}",
            f"--service-account-signing-key-file={self.sa.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount"
            + (",TaintNodesByCondition" if self.static_nodes else ""),
            # `kubectl logs`: reach kwok at the nodes' InternalIP (127.0.0.1), never by
            # resolving a node name through DNS.
            "--kubelet-preferred-address-types=InternalIP",
            "--v=1", *self.apiserver_flags,
        ]

    def _start_apiserver(self) -> None:
        self.ports.setdefault("apiserver", free_port())
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        proc = self._spawn("kube-apiserver", self._apiserver_argv())
        proc.wait_ready(lambda: self.api("GET", "/readyz")[0] == 200, 120)

    def restart_apiserver(self) -> None:
        """Stops kube-apiserver and starts it again on the same port and etcd."""
        self.processes.pop("kube-apiserver").stop()
        proc = Process("kube-apiserver", self._apiserver_argv(),
                       self.dir / "logs" / "kube-apiserver.log")
        proc.start()
        # Keep start order for stop(): the apiserver goes back right after etcd.
        rest = {n: p for n, p in self.processes.items() if n != "etcd"}
        self.processes = {"etcd": self.processes["etcd"], "kube-apiserver": proc, **rest}
        proc.wait_ready(lambda: self.api("GET", "/readyz")[0] == 200, 120)
        self.restarted = True

    def caught_up(self, timeout: float = 180) -> float:
        """Waits until kube-controller-manager and kwok act on new objects again after
        a kube-apiserver restart: a probe node must become Ready and lose its
        ``not-ready`` taint (kube-controller-manager's informers come back with their
        own backoff, up to a minute on a busy machine, as on a cluster). Returns the
        seconds it took."""
        started = time.monotonic()
        if self.api_only:  # nothing but the API to catch up
            self.restarted = False
            return 0.0
        name = f"caught-up-{os.getpid()}-{int(started * 1000) % 100000}"
        try:
            self.create_nodes([name], 0, timeout=timeout)
        finally:
            self.api("DELETE", f"/api/v1/nodes/{name}")
        self.restarted = False
        return time.monotonic() - started

    def pause_etcd(self, seconds: float) -> None:
        """Stops etcd (SIGSTOP, by its PID) for ``seconds`` and lets it go on
        (SIGCONT): kube-apiserver's requests hang meanwhile, as on a slow disk."""
        pid = self.processes["etcd"].pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)

    def _write_kubeconfigs(self) -> None:
        """The admin's ``kubeconfig``, and one per component (``identities``)."""
        identities.write_kubeconfig(self.kubeconfig, self.server, self.ca.cert_path,
                                    identities.ADMIN, self.admin)
        for stem, (who, pair) in self.components.items():
            identities.write_kubeconfig(self._component_kubeconfig(stem), self.server,
                                        self.ca.cert_path, who, pair)

    def _component_kubeconfig(self, name: str) -> Path:
        return self.dir / f"{name}.kubeconfig"

    def _healthz_probe(self, port: int):
        ctx = ssl._create_unverified_context()  # serving cert is self-signed by the component
        return lambda: self._http("GET", port, "/healthz", tls=ctx)[0] == 200

    def _start_component(self, name: str, certs: str, *flags: str) -> None:
        """kube-controller-manager or kube-scheduler: its own identity (``identities``,
        never a cluster admin), serving on a random loopback port, no leader election;
        ready when /healthz answers."""
        port = free_port()
        self.ports[name] = port
        kubeconfig = self._component_kubeconfig(name)
        proc = self._spawn(name, [
            str(self.bin / name),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}",
            f"--cert-dir={self.dir / certs}",
            "--leader-elect=false", "--v=1", *flags,
        ])
        proc.wait_ready(self._healthz_probe(port), 60)

    def _start_controller_manager(self) -> None:
        self._start_component(
            "kube-controller-manager", "kcm-certs",
            f"--controllers={self._kcm_controllers()}",
            # each controller acts as its own ServiceAccount (kube-system/job-controller,
            # ...), as on a kubeadm cluster: admission sees who makes a pod
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.sa.key}",
            f"--root-ca-file={self.ca.cert_path}",
            "--concurrent-gc-syncs=5",
            "--node-monitor-period=1s",
        )

    def _kcm_controllers(self) -> str:
        if not self.static_nodes:
            return KCM_CONTROLLERS
        return ",".join(c for c in KCM_CONTROLLERS.split(",") if c != "node-lifecycle-controller")

    def _start_scheduler(self) -> None:
        self._start_component("kube-scheduler", "scheduler-certs")

    def start_scheduler(self) -> None:
        """Starts kube-scheduler on a running control plane (for one test module)."""
        if "kube-scheduler" not in self.processes:
            self._start_scheduler()

    def stop_scheduler(self) -> None:
        """Stops the kube-scheduler this control plane started, by its PID."""
        proc = self.processes.pop("kube-scheduler", None)
        if proc is not None:
            proc.stop()

    def _stages(self) -> Path:
        """kwok's stages with the grace-period cap filled in, and the pod-ready
        stage waiting for the admitter's mark when the admitter runs."""
        out = self.dir / "kwok-stages.yaml"
        text = STAGES.read_text().replace("__GRACE_CAP_SECONDS__", str(int(self.grace_cap)))
        if ADMITTED_SELECTOR not in text:
            raise RuntimeError(f"{STAGES}: the pod-ready stage lost its admitted selector")
        text = text.replace(ADMITTED_SELECTOR, ADMITTED_SELECTOR if self.admit_pods else "")
        out.write_text(text + STATIC_NODE_STAGE if self.static_nodes else text)
        return out

    def _start_kwok(self) -> None:
        port = free_port()
        self.ports["kwok"] = port
        from . import checkpods  # (not at import: `python -m hack.testenv.checkpods` runs it)

        checkpods.install_logs_crd(self.api)  # kwok serves `kubectl logs` from Logs objects
        proc = self._spawn("kwok", [
            str(self.bin / "kwok"),
            f"--kubeconfig={self.kubeconfig}", f"--config={self._stages()}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            "--node-ip=127.0.0.1", f"--cidr={POD_CIDR}",
            f"--node-lease-duration-seconds={0 if self.static_nodes else 40}",
            f"--server-address=127.0.0.1:{port}",
            # The nodes' kubelet endpoint is kwok's server: `kubectl logs` reaches it.
            f"--node-port={port}", "--enable-crds=Logs",
            f"--tls-cert-file={self.kwok_serving.cert}",
            f"--tls-private-key-file={self.kwok_serving.key}",
        ])
        proc.wait_ready(self._healthz_probe(port), 60)

    def _start_admitter(self) -> None:
        """The kubelet's admission for the fake nodes (admitter.py), before kwok."""
        ready = self.dir / "admitter.ready"
        ready.unlink(missing_ok=True)
        self.rejections_file.touch()
        proc = self._spawn("admitter", [
            sys.executable, "-m", "hack.testenv.admitter",
            f"--port={self.ports['apiserver']}", f"--ca={self.ca.cert_path}",
            f"--cert={self.admin.cert}", f"--key={self.admin.key}",
            f"--record={self.rejections_file}", f"--ready-file={ready}"])
        proc.wait_ready(ready.exists, 60)

    @property
    def rejections_file(self) -> Path:
        return self.dir / "admission-rejections.jsonl"

    def admission_rejections(self, namespace: str | None = None) -> list[dict]:
        """The pods the admitter rejected so far (oldest first), each ``{namespace,
        name, uid, node, reason, message, time}``; only ``namespace``'s if given."""
        try:
            lines = self.rejections_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(line) for line in lines if line.strip()]
        return [r for r in out if namespace is None or r["namespace"] == namespace]

    def _start_check_pods(self) -> None:
        """Our check service for pods of the gpu-scheduler-check image (checkpods.py)."""
        ready = self.dir / "check-pods.ready"
        ready.unlink(missing_ok=True)
        proc = self._spawn("check-pods", [
            sys.executable, "-m", "hack.testenv.checkpods", f"--kubeconfig={self.kubeconfig}",
            f"--log-dir={self.dir / 'pod-logs'}", f"--ready-file={ready}"])
        proc.wait_ready(ready.exists, 60)

    def _wait_default_serviceaccount(self) -> None:
        # Namespaces become usable for pods once the serviceaccount controller ran.
        proc = self.processes["kube-controller-manager"]
        proc.wait_ready(
            lambda: self.api("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0]
            == 200, 60)

    # ---- nodes and pods ----------------------------------------------------------------

    def node_manifest(self, name: str, gpus: int, labels: dict[str, str] | None = None) -> dict:
        capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64", "type": "kwok", **(labels or {}),
                },
            },
            "spec": {},
            "status": {
                "capacity": capacity, "allocatable": dict(capacity),
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                              {"type": "Hostname", "address": name}],
                **({"conditions": _static_conditions()} if self.static_nodes else {}),
            },
        }

    def create_nodes(self, names: list[str], gpus: int, labels: dict[str, str] | None = None,
                     timeout: float = 60) -> None:
        """Creates kwok nodes with ``gpus`` nvidia.com/gpu each and waits until they are
        Ready and untainted."""
        for name in names:
            code, body = self.api("POST", "/api/v1/nodes", self.node_manifest(name, gpus, labels))
            if code not in (201, 409):
                raise RuntimeError(f"creating node {name}: HTTP {code}: {body}")
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending and time.monotonic() < deadline:
            for name in list(pending):
                code, node = self.api("GET", f"/api/v1/nodes/{name}")
                conds = (node.get("status") or {}).get("conditions") or [] if code == 200 else []
                # Ready, and the node lifecycle controller has lifted its
                # node.kubernetes.io/not-ready taint (as a kubelet's node would be).
                taints = (node.get("spec") or {}).get("taints") or [] if code == 200 else []
                if any(c["type"] == "Ready" and c["status"] == "True" for c in conds) and \
                        not any(t["key"].startswith("node.kubernetes.io/") for t in taints):
                    pending.discard(name)
            if pending:
                time.sleep(0.2)
        if pending:
            raise StartError(f"kwok did not make nodes Ready: {sorted(pending)}\n"
                             f"{self.processes['kwok'].log}")

    def set_pod_phase(self, namespace: str, name: str, phase: str, timeout: float = 30) -> dict:
        """Ends a Running pod on a fake node as ``Succeeded`` or ``Failed``; returns the pod.

        Follows the pod with a watch from the annotating write, so a pod that reaches the
        phase and is deleted (and replaced under the same name) at once is still seen.
        """
        if phase not in ("Succeeded", "Failed"):
            raise ValueError(f"phase must be Succeeded or Failed, not {phase!r}")
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        patch = {"metadata": {"annotations": {PHASE_ANNOTATION: phase}}}
        code, body = self.api("PATCH", path, patch, content_type="application/merge-patch+json")
        if code != 200:
            raise RuntimeError(f"annotating pod {namespace}/{name}: HTTP {code}: {body}")
        uid = body["metadata"]["uid"]
        if body.get("status", {}).get("phase") == phase:
            return body
        query = (f"/api/v1/namespaces/{namespace}/pods?watch=1&fieldSelector=metadata.name%3D{name}"
                 f"&resourceVersion={body['metadata']['resourceVersion']}"
                 f"&timeoutSeconds={max(1, int(timeout))}")
        conn = http.client.HTTPSConnection("127.0.0.1", self.ports["apiserver"],
                                           context=self.ssl_context(), timeout=timeout + 5)
        try:
            conn.request("GET", query, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watching pod {namespace}/{name}: HTTP {resp.status}: "
                                   f"{resp.read()[:300]!r}")
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                line = resp.readline()
                if not line:
                    break
                event = json.loads(line)
                pod = event.get("object") or {}
                if (pod.get("metadata") or {}).get("uid") == uid and \
                        (pod.get("status") or {}).get("phase") == phase:
                    return pod
        finally:
            conn.close()
        raise TimeoutError(f"pod {namespace}/{name} did not reach {phase} in {timeout}s")

    def compact_etcd(self) -> int:
        """Compacts etcd to its current revision, so older resourceVersions get 410 Gone."""
        port = self.ports["etcd"]
        key = base64.b64encode(b"/registry").decode()
        _, head = self._http("POST", port, "/v3/kv/range", {"key": key, "limit": 1})
        revision = int(head["header"]["revision"])
        code, body = self._http("POST", port, "/v3/kv/compaction",
                                {"revision": revision, "physical": True})
        if code != 200:
            raise RuntimeError(f"etcd compaction failed: HTTP {code}: {body}")
        return revision

    # ---- clients -----------------------------------------------------------------------

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True, text=True, input=input, timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n"
                               f"{proc.stdout}{proc.stderr}")
        return proc

    def ssl_context(self, *, client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca.cert_path))
        if client_cert:
            ctx.load_cert_chain(str(self.admin.cert), str(self.admin.key))
        return ctx

    def api(self, method: str, path: str, body: dict | None = None, *,
            content_type: str = "application/json", headers: dict[str, str] | None = None,
            client_cert: bool = True) -> tuple[int, dict]:
        """One request to kube-apiserver as the admin (or anonymously)."""
        return self._http(method, self.ports["apiserver"], path, body,
                          tls=self.ssl_context(client_cert=client_cert),
                          content_type=content_type, headers=headers)

    @staticmethod
    def _http(method: str, port: int, path: str, body: dict | None = None, *,
              tls: ssl.SSLContext | None = None, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> tuple[int, dict]:
        if tls is not None:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=10)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            hdrs = {"Accept": "application/json", **(headers or {})}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                hdrs["Content-Type"] = content_type
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read()
            try:
                parsed = json.loads(raw) if raw else {}
            except ValueError:
                parsed = {"raw": raw.decode(errors="replace")}
            if not isinstance(parsed, dict):
                parsed = {"value": parsed}
            return resp.status, parsed
        finally:
            conn.close()


def _static_conditions() -> list[dict]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ok = {"MemoryPressure": "KubeletHasSufficientMemory", "DiskPressure": "KubeletHasNoDiskPressure",
          "PIDPressure": "KubeletHasSufficientPID"}
    conds = [{"type": t, "status": "False", "reason": r, "message": r,
              "lastHeartbeatTime": now, "lastTransitionTime": now} for t, r in ok.items()]
    return [*conds, {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "benchmark-only static node", "lastHeartbeatTime": now,
                     "lastTransitionTime": now}]


@contextlib.contextmanager
def signals_stop() -> Iterator[None]:
    """Turns SIGTERM (and SIGHUP) into SystemExit so ``finally``/``with`` blocks stop
    the control plane; restores the previous handlers afterwards."""

    def _raise(signum, _frame):
        raise SystemExit(128 + signum)

    saved = {s: signal.signal(s, _raise) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":  # pragma: no cover - use `python -m hack.testenv`
    sys.exit("use: python -m hack.testenv up|down|status")
