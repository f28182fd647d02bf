"""Malformed AdmissionReviews get an HTTP answer in words, never a closed connection:
a 400 with the reason, or an AdmissionReview refusing the pod with it; a body above
the limit gets the 413 the docs promise even when the client sends it whole. A real
TLS server on 127.0.0.1, no API."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from internal.webhook.rotation import SelfSignedCerts
from internal.webhook.server import MAX_BODY, WebhookServer
from tests.unit.webhook.tls import connect


@pytest.fixture
def server(tmp_path: Path) -> Iterator[WebhookServer]:
    certs = SelfSignedCerts(tmp_path, ["127.0.0.1"])
    srv = WebhookServer(certs, "127.0.0.1", 0)
    srv.start()
    yield srv
    srv.stop()


def _exchange(port: int, body: bytes) -> tuple[int, bytes]:
    """Sends the whole request the way an HTTP client does (head and body, then reads
    the answer); a connection closed instead of answered fails here."""
    head = (f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with contextlib.closing(connect(port)) as s:
        s.sendall(head + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"connection closed without an answer (got {data!r})"
            data += chunk
        top, rest = data.split(b"\r\n\r\n", 1)
        length = int(next(line.split(b":")[1] for line in top.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(rest) < length:
            chunk = s.recv(65536)
            assert chunk, "connection closed in the middle of the answer"
            rest += chunk
        return int(top.split(b" ", 2)[1]), rest


def _review(obj: Any = None, *, request: Any = "default") -> dict[str, Any]:
    if request == "default":
        request = {"uid": "u-1", "operation": "CREATE", "name": "web-0",
                   "resource": {"group": "", "version": "v1", "resource": "pods"},
                   "object": obj}
    review: dict[str, Any] = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
    if request is not None:
        review["request"] = request
    return review


def _pod(**fields: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": "web-0", "annotations": {"gpu-scheduling-map": "0=node1:0"}},
        "spec": {"schedulerName": "gpu-scheduler", "containers": [{"name": "c"}]}}
    for path, value in fields.items():
        where = pod
        *parents, leaf = path.split("__")
        for p in parents:
            where = where[p]
        where[leaf] = value
    return pod


@pytest.mark.parametrize("obj, field", [
    ("a-pod", "request.object"),
    (_pod(metadata="web-0"), "request.object.metadata"),
    (_pod(metadata__annotations="gpu-scheduling-map"), "request.object.metadata.annotations"),
    (_pod(metadata__labels=["a"]), "request.object.metadata.labels"),
    (_pod(spec="gpu-scheduler"), "request.object.spec"),
])
def test_a_pod_of_the_wrong_shape_is_refused_with_the_field_named(
        server: WebhookServer, obj: Any, field: str) -> None:
    status, body = _exchange(server.port, json.dumps(_review(obj)).encode())
    assert status == 200, body
    resp = json.loads(body)["response"]
    assert resp["uid"] == "u-1" and resp["allowed"] is False
    assert field in resp["status"]["message"] and "not an object" in resp["status"]["message"]


@pytest.mark.parametrize("review, want", [
    (_review(request=None), "expected an AdmissionReview with a request"),
    (_review(request="u-1"), "expected an AdmissionReview with a request"),
    (_review(request={"operation": "CREATE", "object": "a-pod"}), "no uid"),
    (["AdmissionReview"], "not a JSON object"),
])
def test_a_review_that_is_not_one_is_a_bad_request(
        server: WebhookServer, review: Any, want: str) -> None:
    status, body = _exchange(server.port, json.dumps(review).encode())
    assert status == 400 and want in body.decode()


def test_a_string_object_on_a_request_that_is_not_a_pod_create_is_answered(
        server: WebhookServer) -> None:
    review = _review(request={"uid": "u-2", "operation": "DELETE", "object": "a-pod",
                              "resource": {"resource": "pods"}})
    status, body = _exchange(server.port, json.dumps(review).encode())
    assert status == 200 and json.loads(body)["response"] == {"uid": "u-2", "allowed": True}


def test_a_4_mib_body_sent_whole_gets_413(server: WebhookServer) -> None:
    body = b'{"kind": "AdmissionReview", "pad": "' + b"x" * (4 << 20) + b'"}'
    assert len(body) > MAX_BODY
    status, text = _exchange(server.port, body)
    assert status == 413 and b"at most" in text
    # and the server still answers afterwards
    status, _ = _exchange(server.port, json.dumps(_review(_pod())).encode())
    assert status == 200
