"""A small kubeconfig reader: server, CA, client certificate, bearer token.

The ``kubernetes`` package's loader imports every generated API model (about 30 MiB
of a process that otherwise needs a few tens). This reader covers what a kubeconfig
of a local control plane, kind, or a ServiceAccount holds: ``certificate-authority``
(-data), ``client-certificate``/``client-key`` (-data), ``token``/``tokenFile``,
``insecure-skip-tls-verify``, ``tls-server-name``. Anything else (an ``exec`` plugin,
an ``auth-provider``, a username/password) answers None, and the caller falls back
to the ``kubernetes`` package.
"""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

SUPPORTED_USER_KEYS = {"client-certificate", "client-certificate-data", "client-key",
                       "client-key-data", "token", "tokenFile"}


def _named(items: Any, name: str | None) -> dict[str, Any] | None:
    for item in items or ():
        if item.get("name") == name:
            return item
    return None


def _file(base: Path, path: str | None, data: str | None, suffix: str) -> str | None:
    """A path for ``path`` (relative to the kubeconfig) or for ``data`` (base64, written
    to a private temporary file)."""
    if data:
        fd, name = tempfile.mkstemp(prefix="kubeconfig-", suffix=suffix)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(data))
        return name
    if path:
        p = Path(path)
        return str(p if p.is_absolute() else base / p)
    return None


def load(path: str | None = None, context: str | None = None) -> dict[str, Any] | None:
    """RestConfig fields from the kubeconfig at ``path`` (``$KUBECONFIG``, first entry,
    else ``~/.kube/config``); None when it needs what this reader does not do."""
    if path is None:
        env = os.environ.get("KUBECONFIG", "")
        path = env.split(os.pathsep)[0] if env else str(Path.home() / ".kube" / "config")
        if env and os.pathsep in env:
            return None  # merged kubeconfigs: the kubernetes package merges them
    file = Path(path).expanduser()
    doc = yaml.safe_load(file.read_text()) or {}
    ctx = _named(doc.get("contexts"), context or doc.get("current-context"))
    if ctx is None:
        return None
    ctx = ctx.get("context") or {}
    cluster = (_named(doc.get("clusters"), ctx.get("cluster")) or {}).get("cluster")
    named_user = _named(doc.get("users"), ctx.get("user"))
    user = (named_user or {}).get("user") or {}
    if not cluster or not cluster.get("server") or named_user is None or \
            set(user) - SUPPORTED_USER_KEYS:
        return None
    base = file.parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(_file(base, user["tokenFile"], None, "") or "").read_text().strip()
    return {
        "host": cluster["server"].rstrip("/"),
        "ca_file": _file(base, cluster.get("certificate-authority"),
                         cluster.get("certificate-authority-data"), ".crt"),
        "cert_file": _file(base, user.get("client-certificate"),
                           user.get("client-certificate-data"), ".crt"),
        "key_file": _file(base, user.get("client-key"), user.get("client-key-data"), ".key"),
        "token": token or None,
        "verify": not cluster.get("insecure-skip-tls-verify", False),
        "tls_server_name": cluster.get("tls-server-name"),
    }
