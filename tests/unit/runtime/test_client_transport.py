"""The client's own connections (``runtime/connpool.py``) against a TLS server on
127.0.0.1 that verifies nothing but is verified: a connection the server closed while
idle fails no request, a ``Connection: close`` answer is not reused, a silent server
is a ``ReadTimeout`` within the timeout, a port nobody listens on is
``ConnectionRefused``, a wrong CA is a TLS error a create is not sent again after,
and every kind of answer (5xx, 429, not JSON, empty) gives what it gave on urllib3."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hack.testenv.pki import CertificateAuthority
from runtime import Client, RestConfig, errors, metrics
from runtime.retry import NO_RETRY, RetryPolicy
from tests.http_replies import reply_json

QUICK = RetryPolicy(attempts=3, base=0.01, cap=0.02)


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 0.3  # an idle kept-alive connection is closed by the server after this

    def do_GET(self) -> None:
        self.answer()

    def do_POST(self) -> None:
        self.answer()

    def answer(self) -> None:
        server: TLSServer = self.server  # type: ignore[assignment]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path
        with server.lock:
            server.hits[path] = hits = server.hits.get(path, 0) + 1
            server.seen.append((self.command, path, body, self.headers.get_all(
                "Impersonate-Group") or []))
        if path == "/hang":
            server.release.wait(10)
            return
        if path == "/close":
            reply_json(self, {"kind": "Pod"}, 200, {"Connection": "close"})
            self.close_connection = True
        elif path == "/unavailable":
            reply_json(self, {"kind": "Status", "code": 503, "reason": "ServiceUnavailable",
                              "message": "etcd is away"}, 503)
        elif path == "/busy-once" and hits == 1:
            reply_json(self, {"kind": "Status", "code": 429, "reason": "TooManyRequests",
                              "message": "slow down"}, 429, {"Retry-After": "0"})
        elif path == "/text":
            self.raw(200, b"hello, not JSON", "text/plain")
        elif path == "/empty":
            self.raw(200, b"", "application/json")
        elif path == "/html-502":
            self.raw(502, b"<html><body>Bad Gateway</body></html>", "text/html")
        elif path == "/missing":
            reply_json(self, {"kind": "Status", "code": 404, "reason": "NotFound",
                              "message": "pods \"x\" not found"}, 404)
        else:
            reply_json(self, {"kind": "Pod", "metadata": {"name": "p"}})

    def raw(self, code: int, data: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_a: object) -> None:
        pass


class TLSServer(ThreadingHTTPServer):
    """Counts the TCP connections it accepts (before the handshake, so a client that
    refuses the certificate is counted too)."""

    daemon_threads = True

    def __init__(self, ctx: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), Api)
        self.ctx = ctx
        self.lock = threading.Lock()
        self.accepted = 0
        self.hits: dict[str, int] = {}
        self.seen: list[tuple[str, str, bytes, list[str]]] = []
        self.release = threading.Event()

    def get_request(self) -> tuple:
        sock, addr = self.socket.accept()
        with self.lock:
            self.accepted += 1
        return self.ctx.wrap_socket(sock, server_side=True), addr


@pytest.fixture
def pki(tmp_path: Path) -> tuple[CertificateAuthority, Path]:
    ca = CertificateAuthority(tmp_path / "pki")
    return ca, ca.issue("server", "127.0.0.1", server=True, ips=("127.0.0.1",)).cert


@pytest.fixture
def server(pki: tuple) -> Iterator[TLSServer]:
    _, cert = pki
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, cert.with_suffix(".key"))
    httpd = TLSServer(ctx)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield httpd
    httpd.release.set()
    httpd.shutdown()
    httpd.server_close()
    t.join(10)


def client(httpd: TLSServer, ca_file: Path | str, retry: RetryPolicy = NO_RETRY,
           **kw: object) -> Client:
    host = f"https://127.0.0.1:{httpd.server_address[1]}"
    return Client(RestConfig(host=host, ca_file=str(ca_file), **kw), qps=0,  # type: ignore[arg-type]
                  retry=retry)


def ca_of(pki: tuple) -> Path:
    return pki[0].cert_path


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_connection_the_server_closed_while_idle_fails_no_request(
        server: TLSServer, pki: tuple, method: str) -> None:
    """No retry allowed: the request itself must go out on a live connection."""
    c = client(server, ca_of(pki))
    assert c.request("GET", "/api")["kind"] == "Pod"
    time.sleep(0.8)  # the server closes the idle connection after 0.3 s
    body = {"kind": "Pod"} if method == "POST" else None
    assert c.request(method, "/api", body=body)["kind"] == "Pod"
    assert c.request(method, "/api", body=body)["kind"] == "Pod"
    assert server.accepted == 2  # the closed one replaced once, the new one reused


def test_an_answer_that_says_connection_close_is_not_reused(
        server: TLSServer, pki: tuple) -> None:
    c = client(server, ca_of(pki))
    c.request("GET", "/close")
    c.request("POST", "/api", body={"kind": "Pod"})
    c.request("GET", "/api")
    assert server.accepted == 2


def burst(c: Client, threads: int = 8, calls: int = 20) -> list[BaseException]:
    """``threads`` threads at once, each ``calls`` GETs and POSTs in turn."""
    failures: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        try:
            start.wait(10)
            for n in range(calls):
                got = (c.request("POST", f"/w{i}", body={"n": n}) if n % 2
                       else c.request("GET", f"/w{i}"))
                assert got["kind"] == "Pod"
        except BaseException as e:
            failures.append(e)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(60)
    return failures


def test_many_threads_get_all_answers_on_at_most_one_connection_each(
        server: TLSServer, pki: tuple) -> None:
    c = client(server, ca_of(pki))
    assert burst(c) == []
    assert sum(server.hits.get(f"/w{i}", 0) for i in range(8)) == 160
    assert 1 <= server.accepted <= 8, f"{server.accepted} connections for 160 requests"


def test_more_threads_than_kept_connections_never_wait_and_keep_no_surplus(
        server: TLSServer, pki: tuple) -> None:
    """Two idle connections kept at most (``pool_maxsize``), eight threads at once:
    none waits for a connection (each opens one), all are answered, and afterwards
    one thread's requests go on a kept connection."""
    c = client(server, ca_of(pki), pool_maxsize=2)
    assert burst(c) == []
    assert sum(server.hits.get(f"/w{i}", 0) for i in range(8)) == 160
    before = server.accepted
    for _ in range(10):
        c.request("GET", "/api")
    assert server.accepted == before


def test_repeated_headers_are_each_sent(server: TLSServer, pki: tuple) -> None:
    c = client(server, ca_of(pki)).impersonate("someone", ["team-a", "team-b"])
    c.request("GET", "/api")
    assert server.seen[-1][3] == ["team-a", "team-b"]


def test_a_header_value_that_would_start_another_header_is_refused(
        server: TLSServer, pki: tuple) -> None:
    c = client(server, ca_of(pki)).impersonate("someone\r\nX-Injected: yes")
    with pytest.raises(ValueError):
        c.request("GET", "/api")
    assert server.seen == []


def test_a_server_that_never_answers_is_a_read_timeout_within_the_timeout(
        server: TLSServer, pki: tuple) -> None:
    c = client(server, ca_of(pki), retry=RetryPolicy(attempts=5, base=0.01, cap=0.02))
    t0 = time.monotonic()
    with pytest.raises(errors.ApiError) as err:
        c.request("POST", "/hang", body={"kind": "Pod"}, timeout=0.5)
    took = time.monotonic() - t0
    assert err.value.status == 0 and err.value.reason == "ReadTimeout"
    assert server.hits["/hang"] == 1, "a create that may have arrived is not sent again"
    assert 0.45 <= took < 2.0, took
    server.release.set()


def test_a_listener_that_never_shakes_hands_is_a_connect_timeout() -> None:
    """The TCP connection is made (the kernel's backlog) but no TLS answer comes:
    nothing was sent, so even a create may be tried again."""
    with socket.create_server(("127.0.0.1", 0)) as mute:
        c = Client(RestConfig(host=f"https://127.0.0.1:{mute.getsockname()[1]}",
                              verify=False), qps=0, retry=NO_RETRY)
        t0 = time.monotonic()
        with pytest.raises(errors.ApiError) as err:
            c.request("POST", "/api", body={}, timeout=0.4)
        assert err.value.reason == "ConnectTimeout"
        assert time.monotonic() - t0 < 2.0


def test_a_port_nobody_listens_on_is_connection_refused_counted_as_an_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    c = Client(RestConfig(host=f"https://127.0.0.1:{port}", verify=False), qps=0,
               retry=NO_RETRY)

    def errors_counted() -> float:
        for family in metrics.rest_client_requests_total.collect():
            for sample in family.samples:
                if sample.name.endswith("_total") and sample.labels == {
                        "code": "<error>", "method": "POST", "host": f"127.0.0.1:{port}"}:
                    return sample.value
        return 0.0

    before = errors_counted()
    with pytest.raises(errors.ApiError) as err:
        c.request("POST", "/api", body={})
    assert (err.value.status, err.value.reason) == (0, "ConnectionRefused")
    assert errors_counted() - before == 1


def test_a_wrong_ca_is_a_tls_error_a_create_is_not_sent_again_after(
        server: TLSServer, pki: tuple, tmp_path: Path) -> None:
    other = CertificateAuthority(tmp_path / "other")
    c = client(server, other.cert_path, retry=QUICK)
    with pytest.raises(errors.ApiError) as err:
        c.request("POST", "/api", body={"kind": "Pod"})
    assert (err.value.status, err.value.reason) == (0, "TransportError")
    assert "CERTIFICATE_VERIFY_FAILED" in err.value.message
    assert server.accepted == 1
    with pytest.raises(errors.ApiError):
        c.request("GET", "/api")
    assert server.accepted == 1 + 3  # a read is tried again, as any broken connection
    assert server.hits == {}


def test_a_server_name_other_than_the_host_is_verified_against(
        server: TLSServer, pki: tuple) -> None:
    """``tls-server-name``: the certificate (issued for 127.0.0.1) is checked against
    that name, not the host's."""
    c = client(server, ca_of(pki), tls_server_name="kubernetes.default.svc")
    with pytest.raises(errors.ApiError) as err:
        c.request("GET", "/api")
    assert "kubernetes.default.svc" in err.value.message
    assert client(server, ca_of(pki), tls_server_name="127.0.0.1").request(
        "GET", "/api")["kind"] == "Pod"


def test_answers_give_the_same_results_as_before(server: TLSServer, pki: tuple) -> None:
    c = client(server, ca_of(pki), retry=QUICK)
    with pytest.raises(errors.ApiError) as err:
        c.request("GET", "/unavailable")
    assert err.value.status == 503 and "etcd is away" in err.value.message
    assert server.hits["/unavailable"] == 3  # a read is retried after a 5xx
    with pytest.raises(errors.ApiError):
        c.request("POST", "/unavailable", body={})
    assert server.hits["/unavailable"] == 4  # a create is not
    assert c.request("POST", "/busy-once", body={})["kind"] == "Pod"  # 429: retried
    assert server.hits["/busy-once"] == 2
    with pytest.raises(errors.ApiError) as err:
        c.request("GET", "/text")
    assert (err.value.status, err.value.reason) == (0, "BadResponse")
    assert "hello, not JSON" in err.value.message
    assert c.request("GET", "/empty") == {}
    with pytest.raises(errors.ApiError) as err:
        c.request("POST", "/html-502", body={})
    assert (err.value.status, err.value.reason) == (502, "NonStatusBody")
    assert "Bad Gateway" in err.value.message
    with pytest.raises(errors.NotFound):
        c.request("GET", "/missing")
    # every answer above came on the one connection, the error answers included
    assert server.accepted == 1
