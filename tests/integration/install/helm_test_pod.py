"""The kubelet's part for `helm test`'s pod on the local control plane.

kwok runs no containers. Once kube-scheduler has bound the pod and kwok reports it
Running, :func:`serve` runs its script (the chart's own, as rendered in the pod) as a
local process that sees what the container would: a token of the pod's own
ServiceAccount and the cluster's CA where the script reads them (``SA_DIR``), the
API server as ``KUBERNETES_SERVICE_HOST``/``_PORT``, and the pod's environment
(literal values and ``metadata.namespace``). The pod then ends ``Succeeded`` or
``Failed`` by the exit code (kwok's phase-on-demand stage), which is what `helm test`
waits for and reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hack.testenv import ControlPlane
from tests.waiting import eventually


def pod_env(pod: dict[str, Any]) -> dict[str, str]:
    """The test container's environment: literal values and the pod's namespace."""
    out: dict[str, str] = {}
    for e in pod["spec"]["containers"][0].get("env") or ():
        field = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if "value" in e:
            out[e["name"]] = e["value"]
        elif field == "metadata.namespace":
            out[e["name"]] = pod["metadata"]["namespace"]
    return out


def account_dir(plane: ControlPlane, namespace: str, account: str, d: Path) -> Path:
    """A token of ``account`` and the cluster CA, as the pod finds them mounted."""
    d.mkdir(parents=True, exist_ok=True)
    token = plane.kubectl("create", "token", account, "-n", namespace).stdout.strip()
    (d / "token").write_text(token)
    (d / "ca.crt").write_bytes(Path(plane.ca.cert_path).read_bytes())
    return d


def run_script(plane: ControlPlane, pod: dict[str, Any], sa_dir: Path,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The pod's ``python -c SCRIPT``, run here with the pod's view of the cluster."""
    c = pod["spec"]["containers"][0]
    assert c["command"] == ["python", "-c"], c["command"]
    full = {**os.environ, **pod_env(pod), "SA_DIR": str(sa_dir),
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(plane.ports["apiserver"]), **(env or {})}
    return subprocess.run([sys.executable, "-c", c["args"][0]], env=full,
                          capture_output=True, text=True, timeout=60)


def serve(plane: ControlPlane, namespace: str, name: str, work: Path,
          timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Waits for pod ``namespace/name`` Running on its node, runs its script, ends the
    pod by the exit code; returns the script's run."""
    def running() -> dict[str, Any] | None:
        p = plane.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
        pod = json.loads(p.stdout) if p.returncode == 0 else None
        ok = pod is not None and pod["spec"].get("nodeName") and \
            pod.get("status", {}).get("phase") == "Running"
        return pod if ok else None
    pod = eventually(running, timeout=timeout, what=f"{namespace}/{name} bound and Running")
    sa = account_dir(plane, namespace, pod["spec"]["serviceAccountName"], work)
    proc = run_script(plane, pod, sa)
    plane.set_pod_phase(namespace, name, "Succeeded" if proc.returncode == 0 else "Failed")
    return proc
