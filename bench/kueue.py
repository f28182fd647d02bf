"""Kueue as a system of the benchmark: its own controller (v0.17.0, built from its Go
module by ``hack/testenv/peers.sh``) on the benchmark's control plane, beside
kube-scheduler, which binds the pods.

A unit is a ``batch/v1`` Job of one one-GPU pod, created suspended with the
``kueue.x-k8s.io/queue-name`` label naming the LocalQueue of its namespace; Kueue makes
a Workload for it, admits it against the ClusterQueue's quota and unsuspends the Job;
the job controller creates the pod and kube-scheduler binds it.

How it runs here (bench/README.md, "Kueue"):

- its CRDs as its module ships them (``config/components/crd/bases``), the five that
  its install converts through its webhook pointed at ``https://127.0.0.1:<port>/convert``;
- its webhooks (``config/components/webhook/manifests.yaml``): those of Jobs and of its
  own kinds, each pointed at ``https://127.0.0.1:<port><path>``, serving certificate
  for 127.0.0.1 signed by the control plane's CA (``hack/testenv/pki.py``);
- ``internalCertManagement`` off (it would make certificates for a Service name the
  kube-apiserver cannot reach here). Kueue then reads its metrics certificate from
  the fixed path ``/etc/kueue/metrics/certs/tls.{crt,key}``: the process runs in a
  private mount namespace (``unshare``) in which ``/etc`` is an overlay and that path
  a bind of this run's own pair, so nothing outside the run's folder is written;
- every server on 127.0.0.1 (webhook, health, metrics), no leader election, the
  on-demand visibility API server off (an aggregated API that nothing here asks), the
  client limits of the run (``--qps``/``--api-burst``) or Kueue's own (50/100), the
  controller concurrency of its shipped configuration.
"""

from __future__ import annotations

import base64
import copy
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from hack.testenv.controlplane import ControlPlane, free_port
from hack.testenv.peers import Peer, peer
from hack.testenv.process import Process

NAME = "kueue"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_LABEL = f"{GROUP}/queue-name"
LOCAL_QUEUE = "bench"
CLUSTER_QUEUE = "bench"
FLAVOR = "default"
GPU = "nvidia.com/gpu"
#: the CRDs that Kueue's own install serves through its conversion webhook
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
#: the webhooks kept: Jobs' and Kueue's own kinds (the other integrations are off)
WEBHOOK_PATHS = ("-batch-v1-job", "-kueue-x-k8s-io-")


def job(ns: str, name: str, pod_spec: dict[str, Any], queue: str = LOCAL_QUEUE) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": True, "backoffLimit": 0, "completions": 1, "parallelism": 1,
                     "template": {"metadata": {"labels": {"bench": "unit"}},
                                  "spec": copy.deepcopy(pod_spec)}}}


def configuration(*, webhook: int, health: int, metrics: int, cert_dir: Path,
                  qps: float | None, burst: int | None) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics}"},
        "webhook": {"port": webhook, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        # as config/components/manager/controller_manager_config.yaml ships it
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5,
            "LocalQueue.kueue.x-k8s.io": 1, "Cohort.kueue.x-k8s.io": 1,
            "ClusterQueue.kueue.x-k8s.io": 1, "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": qps or 50, "burst": burst or 100},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"VisibilityOnDemand": False},
    }


def cluster_queue(name: str, gpus: int, cohort: str | None = None,
                  borrow: bool = False) -> dict[str, Any]:
    """A ClusterQueue of ``gpus`` nvidia.com/gpu in the one flavor, every namespace;
    in ``cohort`` it lends what it does not use and, with ``borrow``, borrows."""
    spec: dict[str, Any] = {
        "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": FLAVOR, "resources": [{"name": GPU, "nominalQuota": gpus}]}]}]}
    if cohort:
        spec["cohortName"] = cohort
        if not borrow:
            spec["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 0
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
            "metadata": {"name": name}, "spec": spec}


class Kueue:
    """Kueue's install on ``cp`` and its process (one at a time)."""

    def __init__(self, cp: ControlPlane, *, qps: float | None = None,
                 burst: int | None = None, built: Peer | None = None) -> None:
        self.cp, self.qps, self.burst = cp, qps, burst
        self.peer = built or peer(NAME)
        self.dir = cp.dir / "kueue"
        self.webhook_port = free_port()
        self.process: Process | None = None
        self.installed = False

    # ---------------------------------------------------------------- install

    def _certs(self) -> tuple[Path, Path]:
        """The webhook's serving pair (tls.crt/tls.key, as controller-runtime reads them)
        and the metrics pair, both for 127.0.0.1, signed by the control plane's CA."""
        serving, metrics = self.dir / "serving-certs", self.dir / "metrics-certs"
        for where, stem in ((serving, "kueue-webhook"), (metrics, "kueue-metrics")):
            where.mkdir(parents=True, exist_ok=True)
            pair = self.cp.ca.issue(stem, "kueue", server=True, ips=("127.0.0.1",))
            shutil.copy(pair.cert, where / "tls.crt")
            shutil.copy(pair.key, where / "tls.key")
        return serving, metrics

    def install(self) -> None:
        """Its namespace, CRDs (conversion to its webhook) and webhook configurations."""
        if self.installed:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cp.kubectl("create", "namespace", "kueue-system", check=False)
        ca = base64.b64encode(self.cp.ca.pem).decode()
        url = f"https://127.0.0.1:{self.webhook_port}"
        docs = []
        for path in self.peer.crds:
            crd = yaml.safe_load(path.read_text())
            if crd["spec"]["names"]["plural"] in CONVERTED:
                crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "clientConfig": {"url": f"{url}/convert", "caBundle": ca},
                    "conversionReviewVersions": ["v1"]}}
            docs.append(crd)
        for doc in yaml.safe_load_all((self.peer.webhooks or Path("/dev/null")).read_text()):
            if not doc:
                continue
            hooks = []
            for hook in doc.get("webhooks") or ():
                path = hook["clientConfig"]["service"]["path"]
                if any(p in path for p in WEBHOOK_PATHS):
                    hook["clientConfig"] = {"url": url + path, "caBundle": ca}
                    hooks.append(hook)
            doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
            doc["webhooks"] = hooks
            docs.append(doc)
        manifest = self.dir / "install.yaml"
        manifest.write_text(yaml.safe_dump_all(docs))
        # the Workload CRD is over the 256 KiB that a client-side apply's annotation holds
        self.cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest),
                        timeout=300)
        for plural in ("workloads", "clusterqueues", "localqueues", "resourceflavors"):
            self._established(f"{plural}.{GROUP}")
        self.installed = True

    def _established(self, crd: str, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}"
        while time.time() < deadline:
            _, body = self.cp.api("GET", path)
            conds = (body.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                return
            time.sleep(0.2)
        raise RuntimeError(f"CRD {crd} not Established after {timeout:.0f}s")

    # ---------------------------------------------------------------- process

    def start(self) -> int:
        self.install()
        serving, metrics_certs = self._certs()
        health, metrics = free_port(), free_port()
        config = self.dir / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(
            webhook=self.webhook_port, health=health, metrics=metrics, cert_dir=serving,
            qps=self.qps, burst=self.burst)))
        argv = [str(self.peer.binary), f"--config={config}",
                f"--kubeconfig={self.cp.kubeconfig}", "--zap-log-level=info"]
        proc = Process(NAME, self._metrics_path_namespace(metrics_certs, argv),
                       self.cp.dir / "logs" / f"{NAME}.log")
        proc.start()
        self.process = proc
        proc.wait_ready(lambda: self.cp._http("GET", health, "/readyz")[0] == 200, 120)
        return proc.pid  # type: ignore[return-value]

    def _metrics_path_namespace(self, certs: Path, argv: list[str]) -> list[str]:
        """``argv`` run where ``/etc/kueue/metrics/certs`` is ``certs``: in a private
        mount namespace with ``/etc`` as an overlay (its upper layer on a tmpfs of the
        namespace), so the host's /etc is never written. Where ``unshare`` is not
        allowed, a pair already at that path is used; else a clear error."""
        fixed = Path("/etc/kueue/metrics/certs")
        if shutil.which("unshare") and subprocess.run(
                ["unshare", "--mount", "true"], capture_output=True).returncode == 0:
            layer = self.dir / "etc-layer"
            layer.mkdir(exist_ok=True)
            script = (f"mount -t tmpfs tmpfs {layer} && mkdir {layer}/u {layer}/w && "
                      f"mount -t overlay overlay -o lowerdir=/etc,upperdir={layer}/u,"
                      f"workdir={layer}/w /etc && mkdir -p {fixed} && "
                      f"mount --bind {certs} {fixed} && exec \"$@\"")
            return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                    script, "kueue", *argv]
        if (fixed / "tls.crt").exists() and (fixed / "tls.key").exists():
            return argv
        raise RuntimeError(f"Kueue reads its metrics certificate from {fixed}/tls.crt and "
                           "tls.key when internalCertManagement is off; this machine neither "
                           "allows a private mount namespace (unshare --mount) nor has a pair "
                           "there: put one there, or run as a user that may unshare")

    def stop(self) -> None:
        """Stops Kueue and takes its webhook configurations out (their failurePolicy is
        Fail: left in, every later Job create would fail calling a closed port); the
        next start installs them again."""
        if self.process is not None:
            self.process.stop()
            self.process = None
        if self.installed:
            for kind in ("mutating", "validating"):
                self.cp.api("DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}"
                            f"webhookconfigurations/kueue-{kind}-webhook-configuration")
            self.installed = False

    # ---------------------------------------------------------------- queues

    def set_quota(self, gpus: int) -> None:
        """One ResourceFlavor and one ClusterQueue of ``gpus`` GPUs over every namespace."""
        self.apply(self.flavor())
        self.apply(cluster_queue(CLUSTER_QUEUE, gpus))

    @staticmethod
    def flavor() -> dict[str, Any]:
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
                "metadata": {"name": FLAVOR}}

    def apply(self, obj: dict[str, Any]) -> None:
        self.cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                        input=yaml.safe_dump(obj))

    def local_queue(self, ns: str, cq: str = CLUSTER_QUEUE, name: str = LOCAL_QUEUE,
                    timeout: float = 60) -> None:
        """A LocalQueue in ``ns`` pointing at ``cq``, and a wait until Kueue shows it
        active (a Job sent before that waits for Kueue's next look at it)."""
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/localqueues"
        code, body = self.cp.api("POST", base, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": ns}, "spec": {"clusterQueue": cq}})
        if code not in (201, 409):
            raise RuntimeError(f"LocalQueue {ns}/{name}: HTTP {code}: {body}")
        deadline = time.time() + timeout
        while time.time() < deadline:
            _, lq = self.cp.api("GET", f"{base}/{name}")
            conds = (lq.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Active" and c.get("status") == "True" for c in conds):
                return
            time.sleep(0.2)
        raise RuntimeError(f"LocalQueue {ns}/{name} not active after {timeout:.0f}s: {lq}")
