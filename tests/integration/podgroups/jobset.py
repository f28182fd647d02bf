"""The real JobSet controller (v0.12.0, built by ``hack/testenv/peers.sh`` from its Go
module into the control-plane cache) on the local control plane, for a test module.

- its CRD as its module ships it; its webhooks (``config/components/webhook``) each
  pointed at ``https://127.0.0.1:<port><path>`` with a serving certificate for
  127.0.0.1 signed by the control plane's CA, the pod hooks only for pods that carry
  ``jobset.sigs.k8s.io/jobset-name`` (so its stop leaves no other pod refused);
- ``internalCertManagement`` off (it would make certificates for a Service name
  kube-apiserver cannot reach here), no leader election, metrics off, health and
  webhook on 127.0.0.1;
- stopped by its own PID, and its webhook configurations and CRD removed, at the end.
"""

from __future__ import annotations

import base64
import shutil
import uuid
from typing import Any

import yaml

from hack.testenv.controlplane import ControlPlane, free_port
from hack.testenv.peers import peer
from hack.testenv.process import Process
from tests.waiting import eventually

API = "jobset.x-k8s.io/v1alpha2"
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
CRD = "jobsets.jobset.x-k8s.io"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class JobSetController:
    """JobSet's install on ``cp`` and its process."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.peer = peer("jobset")
        self.dir = cp.dir / f"jobset-{uuid.uuid4().hex[:6]}"
        self.webhook_port = free_port()
        self.process: Process | None = None
        self.hooks: list[str] = []

    def _webhooks(self) -> list[dict[str, Any]]:
        ca = base64.b64encode(self.cp.ca.pem).decode()
        url = f"https://127.0.0.1:{self.webhook_port}"
        docs = []
        for doc in yaml.safe_load_all(self.peer.webhooks.read_text()):  # type: ignore[union-attr]
            if not doc:
                continue
            for hook in doc.get("webhooks") or ():
                hook["clientConfig"] = {"url": url + hook["clientConfig"]["service"]["path"],
                                        "caBundle": ca}
                if any("pods" in r.get("resources", ()) for r in hook.get("rules", ())):
                    hook["objectSelector"] = {"matchExpressions": [
                        {"key": NAME_LABEL, "operator": "Exists"}]}
            doc["metadata"] = {"name": f"{self.dir.name}-{doc['metadata']['name']}"}
            docs.append(doc)
        return docs

    def start(self) -> JobSetController:
        self.dir.mkdir(parents=True)
        certs = self.dir / "serving-certs"
        certs.mkdir()
        pair = self.cp.ca.issue("jobset-webhook", "jobset", server=True, ips=("127.0.0.1",))
        shutil.copy(pair.cert, certs / "tls.crt")
        shutil.copy(pair.key, certs / "tls.key")
        docs = [yaml.safe_load(p.read_text()) for p in self.peer.crds] + self._webhooks()
        manifest = self.dir / "install.yaml"
        manifest.write_text(yaml.safe_dump_all(docs))
        self.cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
        self.hooks = [f"{d['kind'].lower()}/{d['metadata']['name']}" for d in docs
                      if d["kind"].endswith("WebhookConfiguration")]
        eventually(self._established, timeout=60, what=f"CRD {CRD} Established")
        health = free_port()
        config = self.dir / "config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1",
                        "certDir": str(certs)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
            "metrics": {"bindAddress": "0"}}))
        self.process = Process("jobset", [str(self.peer.binary), f"--config={config}",
                                          f"--kubeconfig={self.cp.kubeconfig}"],
                               self.dir / "jobset.log")
        self.process.start()
        self.process.wait_ready(lambda: self.cp._http("GET", health, "/readyz")[0] == 200, 120)
        return self

    def _established(self) -> bool:
        _, body = self.cp.api("GET", f"{CRDS}/{CRD}")
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (body.get("status") or {}).get("conditions") or [])

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        for hook in self.hooks:
            self.cp.kubectl("delete", "--ignore-not-found", hook, check=False)
        self.cp.kubectl("delete", "--ignore-not-found", "--wait=false", f"crd/{CRD}",
                        check=False)


def jobset(name: str, jobs: list[tuple[str, int, int]], *, gpus: int = 4,
           order: str | None = None) -> dict[str, Any]:
    """A JobSet of replicated jobs ``(name, replicas, pods per Job)``, pods for
    gpu-scheduler asking ``gpus`` GPUs each."""
    rjs = []
    for rj, replicas, pods in jobs:
        pod = {"spec": {"schedulerName": "gpu-scheduler", "restartPolicy": "Never",
                        "containers": [{"name": "trainer", "image": "trainer:1",
                                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
        rjs.append({"name": rj, "replicas": replicas, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "completionMode": "Indexed", "template": pod}}})
    spec: dict[str, Any] = {"replicatedJobs": rjs}
    if order:
        spec["startupPolicy"] = {"startupPolicyOrder": order}
    return {"apiVersion": API, "kind": "JobSet", "metadata": {"name": name}, "spec": spec}
