"""The webhook server's bounds (attack 6): an oversized body is refused with 413
without being read, reviews beyond ``max_in_flight`` get 429, connections beyond
``max_connections`` are closed at once. A real TLS server on 127.0.0.1, no API."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from internal.webhook.rotation import SelfSignedCerts
from internal.webhook.server import MAX_BODY, READ_TIMEOUT, WebhookServer
from tests.unit.webhook.tls import connect
from tests.waiting import eventually


@pytest.fixture
def server(tmp_path: Path) -> Iterator[WebhookServer]:
    certs = SelfSignedCerts(tmp_path, ["127.0.0.1"])
    srv = WebhookServer(certs, "127.0.0.1", 0, max_in_flight=1, max_connections=3)
    srv.start()
    yield srv
    srv.stop()


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
    with contextlib.closing(connect(server.port)) as s:
        s.sendall(_head(MAX_BODY + 1))  # no body sent: it is never read
        assert _status(s) == 413


def test_reviews_beyond_the_limit_get_429(server: WebhookServer) -> None:
    body = b'{"kind": "AdmissionReview"}'
    with contextlib.closing(connect(server.port)) as slow:
        slow.sendall(_head(len(body)) + body[:5])  # holds the one slot, body unfinished

        def refused() -> bool:
            with contextlib.closing(connect(server.port)) as s:
                s.sendall(_head(len(body)) + body)
                return _status(s) == 429
        eventually(refused, timeout=10, what="a second review refused with 429")
        slow.sendall(body[5:])
        assert _status(slow) == 400  # answered (not an AdmissionReview apiVersion)
    with contextlib.closing(connect(server.port)) as s:
        s.sendall(_head(len(body)) + body)
        assert _status(s) == 400  # the slot is free again


def test_connections_beyond_the_limit_are_closed(server: WebhookServer) -> None:
    held = [connect(server.port) for _ in range(3)]
    try:
        def closed_at_once() -> bool:
            raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            with contextlib.closing(raw):
                return raw.recv(1) == b""  # closed before any TLS handshake
        eventually(closed_at_once, timeout=10, what="a fourth connection closed")
    finally:
        for s in held:
            s.close()


def _answer(sock: ssl.SSLSocket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    status = int(head.split(b" ", 2)[1])
    return status, (json.loads(body) if status == 200 else {"text": body.decode()})


def _post(server: WebhookServer, review: dict) -> tuple[int, dict]:
    body = json.dumps(review).encode()
    with contextlib.closing(connect(server.port)) as s:
        s.sendall(_head(len(body)) + body)
        return _answer(s)


def _pod_review(uid: str | None, labels: dict) -> dict:
    req = {"operation": "CREATE", "name": "web-0",
           "resource": {"group": "", "version": "v1", "resource": "pods"},
           "object": {"metadata": {"name": "web-0", "labels": labels,
                                   "annotations": {"gpu-scheduling-map": "0=node1:0"}},
                      "spec": {"schedulerName": "gpu-scheduler",
                               "containers": [{"name": "c", "image": "x"}]}}}
    if uid is not None:
        req["uid"] = uid
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def test_a_short_body_holds_a_connection_no_longer_than_the_read_timeout(
        server: WebhookServer) -> None:
    """Issue 23: a body shorter than its Content-Length held a connection 15 s+."""
    with contextlib.closing(connect(server.port)) as s:
        start = time.monotonic()
        s.sendall(_head(100) + b'{"kind"')
        status, _ = _answer(s)
        assert status == 408
        assert time.monotonic() - start < READ_TIMEOUT + 3


@pytest.mark.parametrize("labels, want", [
    ({"apps.kubernetes.io/pod-index": "\u00b2"}, "is not a non-negative integer"),
    ({"apps.kubernetes.io/pod-index": "1" * 63}, "is not a non-negative integer"),
])
def test_a_bad_pod_index_is_a_denial_in_words_never_a_500(
        server: WebhookServer, labels: dict, want: str) -> None:
    status, answer = _post(server, _pod_review("u-1", labels))
    assert status == 200
    resp = answer["response"]
    assert resp["uid"] == "u-1" and resp["allowed"] is False
    assert want in resp["status"]["message"]


def test_a_review_without_a_uid_is_a_bad_request(server: WebhookServer) -> None:
    status, answer = _post(server, _pod_review(None, {}))
    assert status == 400 and "no uid" in answer["text"]
