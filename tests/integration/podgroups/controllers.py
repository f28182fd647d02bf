"""The real JobSet (v0.12.0), LeaderWorkerSet (v0.9.0) and Kubeflow Trainer (v2.0.0)
controllers, built by ``hack/testenv/peers.sh`` from their Go modules into the
control-plane cache, on the local control plane for a test module:

- their CRDs as their modules ship them; their webhooks (the modules' webhook
  manifests) each pointed at ``https://127.0.0.1:<port><path>`` with a serving
  certificate for 127.0.0.1 signed by the control plane's CA, the pod hooks only for
  pods that carry the controller's own name label (so a stop leaves no other pod
  refused);
- ``internalCertManagement`` off (it would make certificates for a Service name
  kube-apiserver cannot reach here), no leader election, metrics off, health and
  webhook on 127.0.0.1; Trainer v2.0.0 reads no Configuration: the same by flags of
  our build of its manager (hack/testenv/trainer/main.go: no certificate rotator,
  ``--webhook-host``, ``--cert-dir``);
- stopped by its own PID, its webhook configurations and CRDs removed, at the end.
"""

from __future__ import annotations

import base64
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hack.testenv.controlplane import ControlPlane, free_port
from hack.testenv.peers import peer
from hack.testenv.process import Process
from tests.waiting import eventually

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass(frozen=True)
class Kind:
    peer: str          # its name for peers.sh
    config_api: str    # its Configuration's apiVersion ("": none, flags only)
    pod_label: str     # the label its pods carry (its pod hooks select on it)
    args: tuple[str, ...] = ()


JOBSET = Kind("jobset", "config.jobset.x-k8s.io/v1alpha1", "jobset.sigs.k8s.io/jobset-name")
LWS = Kind("lws", "config.lws.x-k8s.io/v1alpha1", "leaderworkerset.sigs.k8s.io/name",
           ("--leader-elect=false",))
#: its pods are its JobSet's (it has no pod hooks); start it after JOBSET, whose CRD
#: it watches
TRAINER = Kind("trainer", "", "jobset.sigs.k8s.io/jobset-name")


class PeerController:
    """One peer controller's install on ``cp`` and its process."""

    def __init__(self, cp: ControlPlane, kind: Kind) -> None:
        self.cp, self.kind = cp, kind
        self.peer = peer(kind.peer)
        self.dir = cp.dir / f"{kind.peer}-{uuid.uuid4().hex[:6]}"
        self.webhook_port = free_port()
        self.process: Process | None = None
        self.installed: list[str] = []
        self.crds = [yaml.safe_load(p.read_text()) for p in self.peer.crds]

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
                        {"key": self.kind.pod_label, "operator": "Exists"}]}
            doc["metadata"] = {"name": f"{self.dir.name}-{doc['metadata']['name']}"}
            docs.append(doc)
        return docs

    def _established(self) -> bool:
        for crd in self.crds:
            _, body = self.cp.api("GET", f"{CRDS}/{crd['metadata']['name']}")
            if not any(c.get("type") == "Established" and c.get("status") == "True"
                       for c in (body.get("status") or {}).get("conditions") or []):
                return False
        return True

    def _instances(self, crd: dict[str, Any]) -> str:
        """The path listing every object of ``crd``'s kind (its storage version)."""
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        return f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"

    def _release_instances(self) -> None:
        """Every object of our CRDs that a finalizer keeps (an ``orphan`` finalizer
        the garbage collector has not processed yet, a peer's own finalizer with the
        peer stopped) lets go, so that a deleted CRD goes, whatever the garbage
        collector's pace in a long session."""
        for crd in self.crds:
            code, body = self.cp.api("GET", self._instances(crd))
            if code != 200:
                continue
            for item in body.get("items") or ():
                meta = item.get("metadata") or {}
                if not meta.get("finalizers"):
                    continue
                ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
                base = self._instances(crd).rsplit("/", 1)
                self.cp.api("PATCH", f"{base[0]}{ns}/{base[1]}/{meta['name']}",
                            {"metadata": {"finalizers": None}},
                            content_type="application/merge-patch+json")

    def _terminating_gone(self) -> bool:
        """No CRD of ours is still being deleted (a previous module's)."""
        for crd in self.crds:
            code, body = self.cp.api("GET", f"{CRDS}/{crd['metadata']['name']}")
            if code == 200 and (body.get("metadata") or {}).get("deletionTimestamp"):
                self._release_instances()
                return False
        return True

    def start(self) -> PeerController:
        # a previous module's CRDs, deleted at its end, go first: a CRD being deleted
        # still says Established, and refuses every create of its kind
        eventually(self._terminating_gone, timeout=120, interval=1.0,
                   what=f"{self.kind.peer}'s previous CRDs deleted")
        self.dir.mkdir(parents=True)
        certs = self.dir / "serving-certs"
        certs.mkdir()
        pair = self.cp.ca.issue(f"{self.kind.peer}-webhook", self.kind.peer, server=True,
                                ips=("127.0.0.1",))
        shutil.copy(pair.cert, certs / "tls.crt")
        shutil.copy(pair.key, certs / "tls.key")
        docs = self.crds + self._webhooks()
        manifest = self.dir / "install.yaml"
        manifest.write_text(yaml.safe_dump_all(docs))
        self.cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
        self.installed = [f"{d['kind'].lower()}/{d['metadata']['name']}" for d in docs]
        eventually(self._established, timeout=60, what=f"{self.kind.peer}'s CRDs Established")
        health = free_port()
        self.process = Process(self.kind.peer, [
            str(self.peer.binary), *self._settings(certs, health),
            f"--kubeconfig={self.cp.kubeconfig}", *self.kind.args],
            self.dir / f"{self.kind.peer}.log")
        self.process.start()
        self.process.wait_ready(lambda: self.cp._http("GET", health, "/readyz")[0] == 200, 120)
        return self

    def _settings(self, certs: Path, health: int) -> list[str]:
        if not self.kind.config_api:
            return ["--webhook-host=127.0.0.1", f"--webhook-server-port={self.webhook_port}",
                    f"--cert-dir={certs}", f"--health-probe-bind-address=127.0.0.1:{health}",
                    "--metrics-bind-address=0"]
        config = self.dir / "config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": self.kind.config_api, "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": self.webhook_port, "host": "127.0.0.1",
                        "certDir": str(certs)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
            "metrics": {"bindAddress": "0"}}))
        return [f"--config={config}"]

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        for obj in reversed(self.installed):
            self.cp.kubectl("delete", "--ignore-not-found", "--wait=false", obj, check=False)
        self._release_instances()


def gpu_pod(gpus: int = 4) -> dict[str, Any]:
    """A pod template for gpu-scheduler asking ``gpus`` GPUs."""
    return {"spec": {"schedulerName": "gpu-scheduler", "containers": [
        {"name": "trainer", "image": "trainer:1",
         "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def jobset(name: str, jobs: list[tuple[str, int, int]], *,
           order: str | None = None) -> dict[str, Any]:
    """A JobSet of replicated jobs ``(name, replicas, pods per Job)``."""
    rjs = []
    for rj, replicas, pods in jobs:
        pod = gpu_pod()
        pod["spec"]["restartPolicy"] = "Never"
        rjs.append({"name": rj, "replicas": replicas, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "completionMode": "Indexed", "template": pod}}})
    spec: dict[str, Any] = {"replicatedJobs": rjs}
    if order:
        spec["startupPolicy"] = {"startupPolicyOrder": order}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name}, "spec": spec}


def leaderworkerset(name: str, replicas: int, size: int,
                    startup: str = "LeaderCreated") -> dict[str, Any]:
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "startupPolicy": startup,
                     "leaderWorkerTemplate": {"size": size, "workerTemplate": gpu_pod()}}}
