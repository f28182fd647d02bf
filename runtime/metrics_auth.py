"""Authenticated ``/metrics``: who is asking (TokenReview) and may they (SubjectAccessReview),
as controller-runtime's ``filters.WithAuthenticationAndAuthorization`` does.

A request must carry ``Authorization: Bearer <token>``. The token is reviewed by the
API server; the user it names must be allowed ``get`` on the non-resource URL asked
for (``/metrics``), e.g. by a ClusterRole with ``nonResourceURLs: [/metrics]``.

=========================================  ========================================
request                                    answer
=========================================  ========================================
no bearer token                            401 Unauthorized
token the API server does not accept       401 Unauthorized
user not allowed ``get`` on the path       403 Forbidden, naming the user
allowed                                    the route's own answer
the API cannot be asked (down, 5xx)        503, never served unchecked
=========================================  ========================================

Answers are cached per token digest for ``ttl`` seconds (at most ``max_entries``
tokens; the oldest go first), so that a scrape every few seconds costs no API call.
Tokens themselves are never kept.

The bearer token must not cross the network in clear: :func:`serving_tls` gives the
server's TLS context, from ``tls.crt``/``tls.key`` in a directory (cert-manager, a
Secret) or a self-signed certificate made at start, as controller-runtime does
(scrapers then skip verification, or pin it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import ssl
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from runtime import errors

log = structlog.get_logger("runtime.metrics_auth")

#: (status, message) to send instead of the route, or None to serve the route
Verdict = tuple[int, str] | None


class MetricsAuthorizer:
    """``check(headers, path)`` decides one request. Thread-safe."""

    def __init__(self, client: Any, *, ttl: float = 60.0, max_entries: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        self._cache: OrderedDict[tuple[bytes, str], tuple[float, Verdict]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, headers: Mapping[str, str], path: str) -> Verdict:
        auth = headers.get("Authorization") or ""
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return 401, "a bearer token is required (Authorization: Bearer <token>)"
        key = (hashlib.sha256(token.strip().encode()).digest(), path)
        now = self.clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        try:
            verdict = self._review(token.strip(), path)
        except errors.ApiError as e:
            log.warning("metrics_auth.review_failed", code=e.status, error=str(e))
            return 503, "cannot review the token now; try again"
        with self._lock:
            self._cache[key] = (now + self.ttl, verdict)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return verdict

    def _review(self, token: str, path: str) -> Verdict:
        review = self.client.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body={
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token}})
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return 401, "the token was not accepted"
        user = status.get("user") or {}
        name = str(user.get("username") or "")
        sar = self.client.request(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body={
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": name, "uid": user.get("uid"),
                         "groups": user.get("groups") or [],
                         "extra": user.get("extra") or {},
                         "nonResourceAttributes": {"path": path, "verb": "get"}}})
        if not (sar.get("status") or {}).get("allowed"):
            return 403, f'user "{name}" may not get {path}'
        return None


def serving_tls(cert_dir: str | None = None, hosts: tuple[str, ...] = ("localhost",)
                ) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2+): ``cert_dir``'s tls.crt/tls.key, else a
    self-signed ECDSA certificate for ``hosts``, valid a year, made now (its key is
    written to a private temporary directory only to load it)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir:
        ctx.load_cert_chain(os.path.join(cert_dir, "tls.crt"), os.path.join(cert_dir, "tls.key"))
        return ctx
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(h) for h in hosts]), critical=False)
            .sign(key, hashes.SHA256()))
    with tempfile.TemporaryDirectory(prefix="metrics-tls-") as d:
        crt, pem = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        with open(crt, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        fd = os.open(pem, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        ctx.load_cert_chain(crt, pem)
    return ctx
