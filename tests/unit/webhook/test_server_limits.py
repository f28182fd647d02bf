"""The webhook server's bounds (attack 6): an oversized body is refused with 413
without being read, reviews beyond ``max_in_flight`` get 429, connections beyond
``max_connections`` are closed at once. A real TLS server on 127.0.0.1, no API."""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from internal.webhook.rotation import SelfSignedCerts
from internal.webhook.server import MAX_BODY, WebhookServer
from tests.waiting import eventually


@pytest.fixture
def server(tmp_path: Path) -> Iterator[WebhookServer]:
    certs = SelfSignedCerts(tmp_path, ["127.0.0.1"])
    srv = WebhookServer(certs, "127.0.0.1", 0, max_in_flight=1, max_connections=3)
    srv.start()
    yield srv
    srv.stop()


def _connect(port: int) -> ssl.SSLSocket:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw)


def _head(length: int) -> bytes:
    return (f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _status(sock: ssl.SSLSocket) -> int:
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1])


def test_a_body_larger_than_any_pod_review_is_refused_unread(server: WebhookServer) -> None:
    with contextlib.closing(_connect(server.port)) as s:
        s.sendall(_head(MAX_BODY + 1))  # no body sent: it is never read
        assert _status(s) == 413


def test_reviews_beyond_the_limit_get_429(server: WebhookServer) -> None:
    body = b'{"kind": "AdmissionReview"}'
    with contextlib.closing(_connect(server.port)) as slow:
        slow.sendall(_head(len(body)) + body[:5])  # holds the one slot, body unfinished

        def refused() -> bool:
            with contextlib.closing(_connect(server.port)) as s:
                s.sendall(_head(len(body)) + body)
                return _status(s) == 429
        eventually(refused, timeout=10, what="a second review refused with 429")
        slow.sendall(body[5:])
        assert _status(slow) == 400  # answered (not an AdmissionReview apiVersion)
    with contextlib.closing(_connect(server.port)) as s:
        s.sendall(_head(len(body)) + body)
        assert _status(s) == 400  # the slot is free again


def test_connections_beyond_the_limit_are_closed(server: WebhookServer) -> None:
    held = [_connect(server.port) for _ in range(3)]
    try:
        def closed_at_once() -> bool:
            raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            with contextlib.closing(raw):
                return raw.recv(1) == b""  # closed before any TLS handshake
        eventually(closed_at_once, timeout=10, what="a fourth connection closed")
    finally:
        for s in held:
            s.close()
