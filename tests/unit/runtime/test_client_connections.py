"""The client keeps its TLS connections alive and reuses them: N requests to a TLS
server on 127.0.0.1 open one connection from one thread, and no more connections than
threads from several (a TLS handshake per request would cost the controller and the
API server a round trip and a key exchange each)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hack.testenv.pki import CertificateAuthority
from runtime import Client, RestConfig
from tests.http_replies import reply_json


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the API server speaks it
    paths: list[str] = []

    def do_GET(self) -> None:
        Api.paths.append(self.path)
        reply_json(self, {"kind": "APIVersions", "versions": ["v1"]})

    def log_message(self, *_a: object) -> None:
        pass


class CountingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *a: object) -> None:
        super().__init__(*a)  # type: ignore[arg-type]
        self.accepted = 0

    def get_request(self) -> tuple:
        conn = super().get_request()
        self.accepted += 1
        return conn


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[CountingServer, str]]:
    ca = CertificateAuthority(tmp_path / "pki")
    cert = ca.issue("server", "127.0.0.1", server=True, ips=("127.0.0.1",)).cert
    httpd = CountingServer(("127.0.0.1", 0), Api)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, cert.with_suffix(".key"))
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield httpd, str(ca.cert_path)
    httpd.shutdown()
    httpd.server_close()
    t.join(10)


def client(httpd: CountingServer, ca_file: str, prefix: str = "") -> Client:
    host = f"https://127.0.0.1:{httpd.server_address[1]}{prefix}"
    return Client(RestConfig(host=host, ca_file=ca_file), qps=0)


def test_a_server_url_with_a_path_keeps_its_path(server: tuple) -> None:
    """A cluster behind a path (``server: https://proxy/k8s/clusters/c1``, as Rancher
    writes it) gets every request under that path, query included."""
    httpd, ca_file = server
    Api.paths = []
    client(httpd, ca_file, "/k8s/clusters/c1").request("GET", "/api", params={"a": "b c"})
    client(httpd, ca_file, "/").request("GET", "/apis")
    assert Api.paths == ["/k8s/clusters/c1/api?a=b+c", "/apis"]


def test_requests_from_one_thread_share_one_connection(server: tuple) -> None:
    httpd, ca_file = server
    c = client(httpd, ca_file)
    for _ in range(50):
        assert c.request("GET", "/api")["kind"] == "APIVersions"
    assert httpd.accepted == 1


def test_requests_from_several_threads_open_at_most_one_connection_each(
        server: tuple) -> None:
    httpd, ca_file = server
    c = client(httpd, ca_file)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(25):
                c.request("GET", "/api")
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert 1 <= httpd.accepted <= 8, f"{httpd.accepted} connections for 200 requests"
