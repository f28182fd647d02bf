"""config/webhook/rbac.yaml lets the webhook's ServiceAccount patch the CA bundle of
its own MutatingWebhookConfiguration, and nothing else (RBAC is on in testenv)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator

import pytest
import yaml

from hack.testenv import ControlPlane
from internal.webhook.app import WEBHOOK_CONFIG_NAME
from internal.webhook.cabundle import CABundlePatcher
from internal.webhook.certs import generate_ca
from runtime import errors
from runtime.client import Client, RestConfig
from tests.integration.webhook.helpers import MWC_PATH, ROOT, webhook_configuration

RBAC = ROOT / "config" / "webhook" / "rbac.yaml"
SA = "system:serviceaccount:gpu-orchestrator-system:gpu-orchestrator-webhook"
PATHS = {
    "ServiceAccount": "/api/v1/namespaces/gpu-orchestrator-system/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


def _create(cluster: ControlPlane, path: str, obj: dict) -> str | None:
    """Creates ``obj``; returns its path for deletion, or None if it existed."""
    code, body = cluster.api("POST", path, obj)
    assert code in (201, 409), body
    return f"{path}/{obj['metadata']['name']}" if code == 201 else None


@pytest.fixture
def installed(cluster: ControlPlane) -> Iterator[None]:
    created: list[str] = []
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": "gpu-orchestrator-system"}}
    cluster.api("POST", "/api/v1/namespaces", ns)  # left in place: config/ uses it too
    # A configuration under the real name that intercepts nothing (no namespace has
    # the label) and points nowhere: only its caBundle matters here.
    mwc = webhook_configuration(WEBHOOK_CONFIG_NAME, 1)
    mwc["webhooks"][0]["namespaceSelector"] = {
        "matchLabels": {"gpu-orchestrator.dev/test-nothing": "true"}}
    path = _create(cluster, MWC_PATH, mwc)
    if path is None:
        pytest.skip(f"{WEBHOOK_CONFIG_NAME} already exists in this cluster")
    created.append(path)
    try:
        for doc in yaml.safe_load_all(RBAC.read_text()):
            p = _create(cluster, PATHS[doc["kind"]], doc)
            if p:
                created.append(p)
        yield
    finally:
        for p in reversed(created):
            cluster.api("DELETE", p)


def test_service_account_may_patch_the_bundle_of_its_configuration_only(
        cluster: ControlPlane, installed: None) -> None:
    client = Client(RestConfig.from_kubeconfig(str(cluster.kubeconfig))).impersonate(SA)
    bundle = generate_ca(dt.datetime.now(dt.UTC), dt.timedelta(days=1)).cert_pem
    assert CABundlePatcher(client, WEBHOOK_CONFIG_NAME).ensure(bundle)
    _, cfg = cluster.api("GET", f"{MWC_PATH}/{WEBHOOK_CONFIG_NAME}")
    assert cfg["webhooks"][0]["clientConfig"]["caBundle"] == base64.b64encode(bundle).decode()
    # Any other configuration is out of reach.
    with pytest.raises(errors.Forbidden):
        client.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                   "some-other-webhook")
    with pytest.raises(errors.Forbidden):
        client.list("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")
