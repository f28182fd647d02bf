"""The webhook has no API access; the certificate Job (config/webhook/certs_job.yaml)
may update one Secret and patch the CA bundle of one configuration, and a run of it
as that service account makes the certificates and publishes the bundle (RBAC is on
in testenv)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator

import pytest
import yaml

from hack.testenv import ControlPlane
from internal.webhook.app import WEBHOOK_CONFIG_NAME
from internal.webhook.certjob import SECRET_NAME, ensure
from internal.webhook.certs import KeyPair, service_hosts
from runtime import errors
from runtime.client import Client, RestConfig
from tests.integration.webhook.helpers import MWC_PATH, ROOT, webhook_configuration

NS = "gpu-orchestrator-system"
WEBHOOK_SA = f"system:serviceaccount:{NS}:gpu-orchestrator-webhook"
CERTS_SA = f"system:serviceaccount:{NS}:gpu-orchestrator-webhook-certs"
MANIFESTS = [ROOT / "config" / "webhook" / "rbac.yaml",
             ROOT / "config" / "webhook" / "certs_job.yaml"]
PATHS = {
    "ServiceAccount": f"/api/v1/namespaces/{NS}/serviceaccounts",
    "Secret": f"/api/v1/namespaces/{NS}/secrets",
    "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles",
    "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}
MWC = "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"


def _create(cluster: ControlPlane, path: str, obj: dict) -> str | None:
    """Creates ``obj``; returns its path for deletion, or None if it existed."""
    code, body = cluster.api("POST", path, obj)
    assert code in (201, 409), body
    return f"{path}/{obj['metadata']['name']}" if code == 201 else None


@pytest.fixture
def installed(cluster: ControlPlane) -> Iterator[None]:
    created: list[str] = []
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
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
        for manifest in MANIFESTS:
            for doc in yaml.safe_load_all(manifest.read_text()):
                if doc["kind"] in PATHS:  # not the Job and CronJob: no pods run here
                    p = _create(cluster, PATHS[doc["kind"]], doc)
                    if p:
                        created.append(p)
        yield
    finally:
        for p in reversed(created):
            cluster.api("DELETE", p)


def _client(cluster: ControlPlane, user: str) -> Client:
    return Client(RestConfig.from_kubeconfig(str(cluster.kubeconfig))).impersonate(
        user, ["system:serviceaccounts", f"system:serviceaccounts:{NS}",
               "system:authenticated"])


def test_the_webhook_may_not_touch_its_configuration(
        cluster: ControlPlane, installed: None) -> None:
    """Attack 6: a compromised webhook cannot widen its own rules."""
    client = _client(cluster, WEBHOOK_SA)
    with pytest.raises(errors.Forbidden):
        client.get(*MWC, WEBHOOK_CONFIG_NAME)
    with pytest.raises(errors.Forbidden):
        client.patch(*MWC, WEBHOOK_CONFIG_NAME, {"webhooks": []})
    with pytest.raises(errors.Forbidden):
        client.get("v1", "Secret", SECRET_NAME, NS)


def test_the_certificate_job_publishes_the_bundle_and_only_that(
        cluster: ControlPlane, installed: None) -> None:
    client = _client(cluster, CERTS_SA)
    hosts = service_hosts("gpu-orchestrator-webhook", NS)
    first = ensure(client, namespace=NS, secret_name=SECRET_NAME, hosts=hosts,
                   webhook_config_name=WEBHOOK_CONFIG_NAME)
    assert first.new_ca and first.new_serving and first.bundle_in_place
    _, secret = cluster.api("GET", f"{PATHS['Secret']}/{SECRET_NAME}")
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    serving = KeyPair(data["tls.crt"], data["tls.key"])
    ca = KeyPair(data["ca.crt"], data["ca.key"])
    assert serving.cert.issuer == ca.cert.subject
    _, cfg = cluster.api("GET", f"{MWC_PATH}/{WEBHOOK_CONFIG_NAME}")
    assert base64.b64decode(cfg["webhooks"][0]["clientConfig"]["caBundle"]) == data["ca.crt"]

    # A second run changes nothing; a wiped bundle is put back.
    admin = Client(RestConfig.from_kubeconfig(str(cluster.kubeconfig)))
    hook = cfg["webhooks"][0]["name"]
    admin.patch(*MWC, WEBHOOK_CONFIG_NAME,
                {"webhooks": [{"name": hook, "clientConfig": {"caBundle": None}}]},
                patch_type="strategic")
    again = ensure(client, namespace=NS, secret_name=SECRET_NAME, hosts=hosts,
                   webhook_config_name=WEBHOOK_CONFIG_NAME)
    assert not again.new_ca and not again.new_serving and again.bundle_in_place

    # Near the CA's end: a new CA, and the bundle trusts both until the old one ends.
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=3000)
    renewed = ensure(client, namespace=NS, secret_name=SECRET_NAME, hosts=hosts,
                     webhook_config_name=WEBHOOK_CONFIG_NAME, now=later)
    assert renewed.new_ca and renewed.new_serving
    _, cfg = cluster.api("GET", f"{MWC_PATH}/{WEBHOOK_CONFIG_NAME}")
    bundle = base64.b64decode(cfg["webhooks"][0]["clientConfig"]["caBundle"])
    assert data["ca.crt"] in bundle and bundle != data["ca.crt"]

    # Nothing else is in reach.
    with pytest.raises(errors.Forbidden):
        client.get(*MWC, "some-other-webhook")
    with pytest.raises(errors.Forbidden):
        client.list(*MWC)
    with pytest.raises(errors.Forbidden):
        client.list("v1", "Secret", namespace=NS)
    with pytest.raises(errors.Forbidden):
        client.create({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": "other", "namespace": NS}})
