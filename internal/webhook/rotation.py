"""Where the webhook's serving certificate comes from, and how it is renewed.

:class:`SelfSignedCerts` generates a CA and a serving certificate, keeps them in
``cert_dir`` (so a restarted pod reuses them and the CA bundle stays put), and
renews each when less than ``renew_fraction`` of its validity is left. The serving
certificate is simply reissued from the same CA (the bundle does not change). A CA
renewal is a two-step handover so that no request fails in between: the next CA is
first added to the bundle, and only once that bundle is published (patched into the
MutatingWebhookConfiguration, :meth:`mark_published`) does the serving certificate
switch to one signed by it; the old CA stays in the bundle until it expires.

:class:`FileCerts` serves a certificate someone else writes (cert-manager's Secret
mounted at ``cert_dir``) and reloads it when the files change; cert-manager's
cainjector publishes the bundle.

Both hand out a fresh ``ssl.SSLContext`` (TLS 1.2 minimum) after each change; the
server wraps every new connection with the current one (hot reload).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import ssl
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import structlog
from cryptography import x509

from internal.webhook import certs
from internal.webhook.certs import KeyPair

log = structlog.get_logger("webhook.certs")

Clock = Callable[[], dt.datetime]


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    return ctx


def _write(path: Path, data: bytes, mode: int = 0o644) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class ServingCerts(Protocol):
    def ssl_context(self) -> ssl.SSLContext: ...
    def ca_bundle(self) -> bytes | None: ...
    def refresh(self) -> bool: ...
    def mark_published(self, bundle: bytes) -> None: ...
    def valid(self) -> bool: ...


class SelfSignedCerts:
    def __init__(
        self,
        cert_dir: Path | str,
        hosts: Sequence[str],
        *,
        ca_validity: dt.timedelta = dt.timedelta(days=3650),
        cert_validity: dt.timedelta = dt.timedelta(days=90),
        renew_fraction: float = 1 / 3,
        clock: Clock = utcnow,
    ) -> None:
        if not 0 < renew_fraction < 1:
            raise ValueError("renew_fraction must be between 0 and 1")
        self.dir = Path(cert_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hosts = list(dict.fromkeys(hosts))
        self.ca_validity = ca_validity
        self.cert_validity = cert_validity
        self.renew_fraction = renew_fraction
        self.clock = clock
        self._lock = threading.Lock()
        self._ca: KeyPair | None = None
        self._next_ca: KeyPair | None = None
        self._old_cas: list[KeyPair] = []
        self._serving: KeyPair | None = None
        self._ctx: ssl.SSLContext | None = None
        self._published: bytes | None = None
        self._load()
        self.refresh()

    # ---- state on disk --------------------------------------------------------------

    def _path(self, name: str) -> Path:
        return self.dir / name

    def _read_pair(self, cert: str, key: str) -> KeyPair | None:
        try:
            pair = KeyPair(self._path(cert).read_bytes(), self._path(key).read_bytes())
            _ = pair.cert
            return pair
        except (OSError, ValueError):
            return None

    def _load(self) -> None:
        self._ca = self._read_pair("ca.crt", "ca.key")
        self._serving = self._read_pair("tls.crt", "tls.key")
        if self._ca and self._serving and self._serving.cert.issuer != self._ca.cert.subject:
            self._serving = None
        if self._ca is not None:
            log.info("webhook_certs_loaded", dir=str(self.dir),
                     ca_not_after=self._ca.not_after.isoformat())

    def _save(self) -> None:
        assert self._ca is not None and self._serving is not None
        _write(self._path("ca.key"), self._ca.key_pem, 0o600)
        _write(self._path("ca.crt"), self._ca.cert_pem)
        _write(self._path("tls.key"), self._serving.key_pem, 0o600)
        _write(self._path("tls.crt"), self._serving.cert_pem)

    # ---- renewal --------------------------------------------------------------------

    def _due(self, pair: KeyPair | None, now: dt.datetime) -> bool:
        if pair is None:
            return True
        life = pair.not_after - pair.not_before
        return now >= pair.not_after - life * self.renew_fraction

    def refresh(self) -> bool:
        """Renews what is due; True when the serving certificate or the bundle changed."""
        with self._lock:
            now = self.clock()
            changed = False
            self._old_cas = [c for c in self._old_cas if c.not_after > now]
            if self._ca is None or self._ca.not_after <= now:
                # Nothing usable to hand over from: start afresh.
                self._ca, self._next_ca, self._serving = (
                    certs.generate_ca(now, self.ca_validity), None, None)
                changed = True
            elif self._next_ca is None and self._due(self._ca, now):
                self._next_ca = certs.generate_ca(now, self.ca_validity)
                log.info("webhook_ca_renewal_started",
                         ca_not_after=self._ca.not_after.isoformat())
                changed = True
            if self._next_ca is not None and self._published is not None and (
                    self._next_ca.cert_pem in self._published):
                self._old_cas.append(self._ca)
                self._ca, self._next_ca, self._serving = self._next_ca, None, None
                log.info("webhook_ca_renewed", ca_not_after=self._ca.not_after.isoformat())
            if (self._serving is None or self._due(self._serving, now)
                    or set(self.hosts) - certs.san_hosts(self._serving)):
                self._serving = certs.issue_serving(self._ca, self.hosts, now,
                                                    self.cert_validity)
                log.info("webhook_cert_issued", hosts=",".join(self.hosts),
                         not_after=self._serving.not_after.isoformat())
                self._ctx = None
                changed = True
            if self._ctx is None:
                self._save()
                self._ctx = server_context(self._path("tls.crt"), self._path("tls.key"))
            return changed

    # ---- what the server and the bundle patcher use ---------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        with self._lock:
            assert self._ctx is not None
            return self._ctx

    def ca_bundle(self) -> bytes:
        """PEM of every CA a client should trust now: current, next, still-valid old."""
        with self._lock:
            cas = [self._ca, self._next_ca, *self._old_cas]
            return b"".join(c.cert_pem for c in cas if c is not None)

    def mark_published(self, bundle: bytes) -> None:
        """Told that ``bundle`` is now in the webhook configuration."""
        with self._lock:
            self._published = bundle

    def serving(self) -> KeyPair:
        with self._lock:
            assert self._serving is not None
            return self._serving

    def valid(self) -> bool:
        with self._lock:
            now = self.clock()
            return self._serving is not None and (
                self._serving.not_before <= now < self._serving.not_after)


class FileCerts:
    """A certificate written by someone else (``tls.crt``/``tls.key`` in ``cert_dir``),
    reloaded when the files change."""

    def __init__(self, cert_dir: Path | str, clock: Clock = utcnow) -> None:
        self.dir = Path(cert_dir)
        self.clock = clock
        self._lock = threading.Lock()
        self._digest = b""
        self._ctx: ssl.SSLContext | None = None
        self._not_after: dt.datetime | None = None
        if not self.refresh():
            raise FileNotFoundError(f"no tls.crt/tls.key in {self.dir}")

    def refresh(self) -> bool:
        crt, key = self.dir / "tls.crt", self.dir / "tls.key"
        try:
            data = crt.read_bytes() + key.read_bytes()
        except OSError:
            return False
        digest = hashlib.sha256(data).digest()
        with self._lock:
            if digest == self._digest:
                return False
            try:
                ctx = server_context(crt, key)
                not_after = x509.load_pem_x509_certificate(crt.read_bytes()).not_valid_after_utc
            except (ssl.SSLError, ValueError, OSError) as exc:  # half-written update
                log.warning("webhook_cert_reload_failed", error=str(exc))
                return False
            self._ctx, self._digest, self._not_after = ctx, digest, not_after
            log.info("webhook_cert_loaded", dir=str(self.dir), not_after=not_after.isoformat())
            return True

    def ssl_context(self) -> ssl.SSLContext:
        with self._lock:
            assert self._ctx is not None
            return self._ctx

    def ca_bundle(self) -> bytes | None:
        return None

    def mark_published(self, bundle: bytes) -> None:
        return None

    def valid(self) -> bool:
        with self._lock:
            return self._not_after is not None and self.clock() < self._not_after
