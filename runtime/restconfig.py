"""How to reach and authenticate to an API server: kubeconfig, in-cluster, impersonation."""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RestConfig:
    """How to reach and authenticate to an API server."""

    host: str
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    #: PEM bytes from a kubeconfig's ``*-data`` fields (or an exec plugin), kept in
    #: memory: see ``ssl_context``
    ca_data: bytes | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    #: the cluster's ``proxy-url`` (http:// or https://)
    proxy_url: str | None = None
    token: str | None = None  # the bearer token, without the "Bearer " prefix
    verify: bool = True
    tls_server_name: str | None = None
    impersonate_user: str | None = None
    impersonate_groups: list[str] = field(default_factory=list)
    impersonate_extra: dict[str, list[str]] = field(default_factory=dict)
    qps: float = 50.0
    burst: int = 100
    timeout: float | None = 30.0  # seconds per request; None: no timeout
    pool_maxsize: int = 32
    user_agent: str = "runtime-client/0.1"
    token_file: str | None = None  # re-read when it changes (a projected SA token)
    _k8s_config: Any = None  # kubernetes.client.Configuration, for token refresh

    @classmethod
    def from_kubeconfig(
        cls, path: str | None = None, context: str | None = None, **kw: Any
    ) -> RestConfig:
        """Load a kubeconfig file (``$KUBECONFIG`` or ``~/.kube/config`` when ``path`` is None).
        Read by :mod:`runtime.kubeconfig` when it can (certificates, tokens), else by
        the ``kubernetes`` package (exec plugins, auth providers)."""
        from runtime import kubeconfig

        light = kubeconfig.load(path, context)
        if light is not None:
            return cls(**light, **kw)
        from kubernetes import client as kclient
        from kubernetes import config as kconfig

        cfg = kclient.Configuration()
        # $KUBECONFIG as it is now (the kubernetes package reads it once, at import)
        env = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
        kconfig.load_kube_config(config_file=path or env or None, context=context,
                                 client_configuration=cfg)
        return cls._from_k8s(cfg, **kw)

    @classmethod
    def in_cluster(cls, **kw: Any) -> RestConfig:
        sa = "/var/run/secrets/kubernetes.io/serviceaccount"
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
            "KUBERNETES_SERVICE_PORT")
        if host and port and os.path.exists(f"{sa}/token"):
            if ":" in host:
                host = f"[{host}]"
            return cls(host=f"https://{host}:{port}", ca_file=f"{sa}/ca.crt",
                       token_file=f"{sa}/token", **kw)
        from kubernetes import client as kclient
        from kubernetes import config as kconfig

        cfg = kclient.Configuration()
        kconfig.load_incluster_config(client_configuration=cfg)
        return cls._from_k8s(cfg, **kw)

    @classmethod
    def load(cls, kubeconfig: str | None = None, context: str | None = None,
             **kw: Any) -> RestConfig:
        """In-cluster config when running in a pod and no kubeconfig (nor context) is
        given, else the kubeconfig (``$KUBECONFIG``'s files merged)."""
        if (
            kubeconfig is None
            and context is None
            and os.environ.get("KUBERNETES_SERVICE_HOST")
            and not os.environ.get("KUBECONFIG")
        ):
            return cls.in_cluster(**kw)
        return cls.from_kubeconfig(kubeconfig, context, **kw)

    @classmethod
    def _from_k8s(cls, cfg: Any, **kw: Any) -> RestConfig:
        rc = cls(
            host=cfg.host.rstrip("/"),
            ca_file=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            verify=bool(cfg.verify_ssl),
            tls_server_name=getattr(cfg, "tls_server_name", None),
            **kw,
        )
        rc._k8s_config = cfg
        return rc

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS settings of this config, credentials loaded from memory.

        The CA (``ca_data``) goes in through ``load_verify_locations(cadata=...)``.
        Python's ``ssl`` reads a client certificate and key only from a path, so
        ``cert_data``/``key_data`` are handed over through an anonymous memory file
        (``os.memfd_create``, read back as ``/proc/self/fd/N``): never on a disk,
        gone when closed, right after ``load_cert_chain``. Where memfd is missing
        (not Linux), a file of mode 0600 in a fresh private directory (0700) is used
        and deleted right after the load."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_file or self.ca_data:
            ctx.load_verify_locations(
                cafile=self.ca_file,
                cadata=self.ca_data.decode("ascii", "replace") if self.ca_data else None)
        else:
            ctx.load_default_certs()
        if self.cert_data is not None or self.key_data is not None:
            cert = self.cert_data or (_read_bytes(self.cert_file) if self.cert_file else b"")
            key = self.key_data or (_read_bytes(self.key_file) if self.key_file else b"")
            _load_chain_from_memory(ctx, cert, key)
        elif self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx

    def bearer(self) -> str | None:
        if self.token_file:
            return f"Bearer {_read_token(self.token_file)}"
        if self._k8s_config is not None:
            for ident in ("BearerToken", "authorization"):
                v = self._k8s_config.get_api_key_with_prefix(ident)
                if v:
                    return v if v.lower().startswith("bearer ") else f"Bearer {v}"
        return f"Bearer {self.token}" if self.token else None

    def impersonating(self, user: str, groups: list[str] | None = None,
                      extra: Mapping[str, list[str]] | None = None) -> RestConfig:
        """A copy of this config that impersonates ``user`` (and ``groups``, and the
        user's ``extra`` fields, e.g. the node a service-account token is bound to)."""
        import copy

        c = copy.copy(self)
        c.impersonate_user = user
        c.impersonate_groups = list(groups or [])
        c.impersonate_extra = {k: list(v) for k, v in (extra or {}).items()}
        return c


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _load_chain_from_memory(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``ctx.load_cert_chain`` from PEM bytes, without leaving them on a disk."""
    pem = cert.rstrip(b"\n") + b"\n" + key
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd("kubeconfig-client-credentials", getattr(os, "MFD_CLOEXEC", 0))
        try:
            _write_all(fd, pem)
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="kubeconfig-") as folder:  # mode 0700
        path = os.path.join(folder, "client.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, pem)
        finally:
            os.close(fd)
        try:
            ctx.load_cert_chain(path)
        finally:
            os.unlink(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


_TOKENS: dict[str, tuple[float, str]] = {}


def _read_token(path: str) -> str:
    """The token in ``path``, read again when the file changes (kubelet rotates it)."""
    mtime = os.stat(path).st_mtime
    cached = _TOKENS.get(path)
    if cached is None or cached[0] != mtime:
        with open(path) as f:
            cached = _TOKENS[path] = (mtime, f.read().strip())
    return cached[1]
