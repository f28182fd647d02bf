"""Authenticated /metrics on the local control plane, over HTTPS with a self-signed
certificate: a service account's real token, reviewed by kube-apiserver
(TokenReview), allowed by RBAC (SubjectAccessReview) only when bound to
gpu-orchestrator-metrics-reader (config/rbac/user_roles.yaml)."""

from __future__ import annotations

import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.testenv import ControlPlane
from runtime import Manager, Options
from runtime.client import Client
from runtime.metrics_auth import MetricsAuthorizer, serving_tls
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[3]


def _token(cluster: ControlPlane, namespace: str, name: str) -> str:
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    assert cluster.api("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", sa)[0] == 201
    code, req = cluster.api(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 600}})
    assert code == 201, req
    return str(req["status"]["token"])


@pytest.fixture
def secured(client: Client, cluster: ControlPlane) -> Iterator[Manager]:
    cluster.kubectl("apply", "-f", str(ROOT / "config" / "rbac" / "user_roles.yaml"))
    mgr = Manager(client, Options(metrics_bind_address="127.0.0.1:0",
                                  health_probe_bind_address="0", graceful_shutdown_timeout=5,
                                  metrics_authorize=MetricsAuthorizer(client, ttl=1.0).check,
                                  metrics_tls=serving_tls()))
    t = threading.Thread(target=mgr.start, daemon=True)
    t.start()
    eventually(mgr.servers_started.is_set, timeout=15, what="metrics server started")
    yield mgr
    mgr.stop()
    t.join(15)


def _get(port: int, token: str | None) -> tuple[int, str]:
    req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE  # self-signed
    try:
        with urllib.request.urlopen(req, timeout=10, context=unverified) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_metrics_need_a_token_allowed_to_read_them(
        secured: Manager, cluster: ControlPlane, namespace: str) -> None:
    port = secured.metrics_port
    assert port is not None
    scraper, nosy = _token(cluster, namespace, "scraper"), _token(cluster, namespace, "nosy")
    cluster.kubectl("create", "clusterrolebinding", f"scraper-{namespace}",
                    "--clusterrole=gpu-orchestrator-metrics-reader",
                    f"--serviceaccount={namespace}:scraper")
    try:
        assert _get(port, None)[0] == 401
        assert _get(port, "not-a-token") == (401, "the token was not accepted\n")
        code, body = _get(port, nosy)
        assert code == 403 and f"system:serviceaccount:{namespace}:nosy" in body
        code, body = eventually(lambda: (r := _get(port, scraper))[0] == 200 and r,
                                timeout=30, what="the scraper reads /metrics")
        assert "workqueue" in body or "process_" in body or "python_" in body
    finally:
        cluster.kubectl("delete", "clusterrolebinding", f"scraper-{namespace}")


def test_plain_http_is_not_served_by_the_secure_server(secured: Manager) -> None:
    port = secured.metrics_port
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
