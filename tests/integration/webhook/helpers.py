"""Running the webhook in-process against the local control plane, registered by URL
on 127.0.0.1 with the selectors of config/webhook."""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from hack.testenv import ControlPlane
from internal.webhook import Webhook, build

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "config" / "webhook" / "mutating_webhook_configuration.yaml"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
MWC_PATH = f"{ADMISSION}/mutatingwebhookconfigurations"
SEED = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:3"


def webhook_configuration(name: str, port: int) -> dict[str, Any]:
    """config/webhook's configuration, renamed, pointing at 127.0.0.1:``port``, with
    no caBundle: the webhook patches it in itself."""
    doc = copy.deepcopy(yaml.safe_load(CONFIG.read_text()))
    doc["metadata"] = {"name": name}
    for hook in doc["webhooks"]:
        path = hook["clientConfig"]["service"].get("path", "/mutate")
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
    return doc


@contextlib.contextmanager
def running_webhook(cluster: ControlPlane, tmp: Path) -> Iterator[tuple[Webhook, str]]:
    """A started webhook and the name of its (registered) configuration; both are
    removed afterwards (the configuration is cluster-scoped and shared)."""
    name = f"gpu-webhook-test-{uuid.uuid4().hex[:6]}"
    webhook = build(bind_address="127.0.0.1", port=0, cert_dir=str(tmp),
                    webhook_config_name=name, kubeconfig=str(cluster.kubeconfig))
    code, body = cluster.api("POST", MWC_PATH, webhook_configuration(name, webhook.server.port))
    assert code == 201, body
    try:
        webhook.start()
        yield webhook, name
    finally:
        webhook.stop()
        cluster.api("DELETE", f"{MWC_PATH}/{name}")


@contextlib.contextmanager
def pod_devices_policy(cluster: ControlPlane) -> Iterator[str]:
    """The pod-devices admission policy and its binding as generated
    (api/v1alpha1/pod_devices.py), under names of the caller's own (cluster-scoped;
    the controller tests install the same under theirs); removed afterwards."""
    from api.v1alpha1.pod_devices import pod_devices

    suffix = uuid.uuid4().hex[:6]
    made = []
    try:
        for doc in pod_devices():
            doc = copy.deepcopy(doc)
            doc["metadata"]["name"] += f"-{suffix}"
            if doc["kind"] == "ValidatingAdmissionPolicyBinding":
                doc["spec"]["policyName"] += f"-{suffix}"
                path = f"{ADMISSION}/validatingadmissionpolicybindings"
            else:
                path = f"{ADMISSION}/validatingadmissionpolicies"
            code, body = cluster.api("POST", path, doc)
            assert code == 201, body
            made.append(f"{path}/{doc['metadata']['name']}")
        yield suffix
    finally:
        for path in reversed(made):
            cluster.api("DELETE", path)


def pod(name: str, *, annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None, env: list[dict] | None = None,
        containers: int = 1) -> dict[str, Any]:
    cs = []
    for i in range(containers):
        c: dict[str, Any] = {"name": f"c{i}", "image": "gpu-scheduler-check:latest"}
        if env is not None:
            c["env"] = env
        cs.append(c)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {},
                         "labels": labels or {}},
            "spec": {"schedulerName": "gpu-scheduler", "containers": cs}}


def create(cluster: ControlPlane, namespace: str, obj: dict[str, Any]):
    """``kubectl create``: returns the CompletedProcess (warnings are on stderr)."""
    return cluster.kubectl("create", "-n", namespace, "-o", "json", "-f", "-",
                           input=json.dumps(obj), check=False)


def env_of(obj: dict[str, Any], kind: str = "containers") -> list[dict[str, str]]:
    return [{e["name"]: e.get("value", "") for e in c.get("env") or []}
            for c in obj["spec"].get(kind) or []]
