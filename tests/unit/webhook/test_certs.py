"""Certificate generation, renewal, and the HTTPS server picking up a renewed
certificate without a restart (local sockets only, no cluster)."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from internal.webhook.certs import KeyPair
from internal.webhook.rotation import SelfSignedCerts
from internal.webhook.server import WebhookServer
from tests.unit.webhook.test_patch import make_pod, review

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
HOSTS = ["svc.ns.svc", "127.0.0.1"]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> dt.datetime:
        return self.now


def make(tmp_path: Path, clock: Clock) -> SelfSignedCerts:
    return SelfSignedCerts(tmp_path, HOSTS, ca_validity=dt.timedelta(days=30),
                           cert_validity=dt.timedelta(days=3), clock=clock)


def test_serving_cert_renewed_before_expiry_with_the_same_ca(tmp_path: Path) -> None:
    clock = Clock()
    certs = make(tmp_path, clock)
    first, bundle = certs.serving(), certs.ca_bundle()
    assert {"svc.ns.svc", "127.0.0.1"} <= {
        *first.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value.get_values_for_type(x509.DNSName), "127.0.0.1"}
    clock.now = T0 + dt.timedelta(days=1)
    assert not certs.refresh()  # 2 of 3 days left: not yet
    clock.now = T0 + dt.timedelta(days=2, hours=1)
    assert certs.refresh()
    assert certs.serving().cert.serial_number != first.cert.serial_number
    assert certs.serving().not_after > first.not_after
    assert certs.ca_bundle() == bundle


def test_ca_handover_waits_for_the_bundle(tmp_path: Path) -> None:
    clock = Clock()
    certs = make(tmp_path, clock)
    old_ca = certs.ca_bundle()
    certs.mark_published(old_ca)
    clock.now = T0 + dt.timedelta(days=21)
    assert certs.refresh()
    bundle = certs.ca_bundle()
    assert bundle.startswith(old_ca) and len(bundle) > len(old_ca)  # old + next
    issuer = certs.serving().cert.issuer
    certs.refresh()
    assert certs.serving().cert.issuer == issuer  # not switched before publication
    certs.mark_published(bundle)
    assert certs.refresh()
    new_ca = x509.load_pem_x509_certificates(bundle)[1]
    assert certs.serving().cert.issuer == new_ca.subject
    assert certs.ca_bundle() == bundle[len(old_ca):] + old_ca  # old kept until it expires


def test_restart_reuses_the_certificates_on_disk(tmp_path: Path) -> None:
    clock = Clock()
    bundle = make(tmp_path, clock).ca_bundle()
    assert make(tmp_path, clock).ca_bundle() == bundle


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[WebhookServer, SelfSignedCerts, Path]]:
    # renew_fraction 0.99 of a 1 h certificate: every refresh() renews it.
    certs = SelfSignedCerts(tmp_path, HOSTS, cert_validity=dt.timedelta(hours=1),
                            renew_fraction=0.99)
    srv = WebhookServer(certs, "127.0.0.1", 0)
    srv.start()
    ca = tmp_path / "bundle.pem"
    ca.write_bytes(certs.ca_bundle())
    yield srv, certs, ca
    srv.stop()


def _get(port: int, ca: Path, method: str = "GET", path: str = "/healthz",
         body: bytes | None = None) -> tuple[int, bytes, bytes]:
    ctx = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert conn.sock is not None
        return resp.status, resp.read(), conn.sock.getpeercert(binary_form=True) or b""
    finally:
        conn.close()


def test_server_serves_tls12_plus_and_hot_reloads(
        server: tuple[WebhookServer, SelfSignedCerts, Path]) -> None:
    srv, certs, ca = server
    assert certs.ssl_context().minimum_version >= ssl.TLSVersion.TLSv1_2
    status, body, der1 = _get(srv.port, ca)
    assert (status, body) == (200, b"ok")
    assert certs.refresh()
    _, _, der2 = _get(srv.port, ca)
    assert der1 and der2 and der1 != der2  # new connections get the renewed cert


def test_server_answers_admission_reviews(
        server: tuple[WebhookServer, SelfSignedCerts, Path]) -> None:
    srv, _, ca = server
    status, body, _ = _get(srv.port, ca, "POST", "/mutate",
                           json.dumps(review(make_pod("p-1"))).encode())
    assert status == 200
    out = json.loads(body)
    assert out["kind"] == "AdmissionReview" and out["response"]["patchType"] == "JSONPatch"
    status, _, _ = _get(srv.port, ca, "POST", "/mutate", b"{not json")
    assert status == 400


def test_stop_closes_kept_alive_connections(
        server: tuple[WebhookServer, SelfSignedCerts, Path]) -> None:
    srv, _, ca = server
    conn = http.client.HTTPSConnection(
        "127.0.0.1", srv.port, context=ssl.create_default_context(cafile=str(ca)), timeout=5)
    try:
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() == b"ok"
        srv.stop()
        with pytest.raises(OSError):  # the kept-alive connection no longer answers
            conn.request("GET", "/healthz")
            conn.getresponse().read()
    finally:
        conn.close()


def test_file_certs_reload_when_the_files_change(tmp_path: Path) -> None:
    from internal.webhook import certs as gen
    from internal.webhook.rotation import FileCerts

    ca = gen.generate_ca(T0, dt.timedelta(days=30))

    def write() -> KeyPair:
        pair = gen.issue_serving(ca, HOSTS, dt.datetime.now(dt.UTC), dt.timedelta(days=1))
        (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
        (tmp_path / "tls.key").write_bytes(pair.key_pem)
        return pair

    write()
    files = FileCerts(tmp_path)
    assert files.valid() and files.ca_bundle() is None
    assert not files.refresh()  # unchanged
    first = files.ssl_context()
    write()
    assert files.refresh() and files.ssl_context() is not first
