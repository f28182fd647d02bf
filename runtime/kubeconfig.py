"""A kubeconfig reader: what kubectl reads, without the ``kubernetes`` package.

The ``kubernetes`` package's loader imports every generated API model (about 30 MiB
of a process that otherwise needs a few tens), ignores a cluster's ``proxy-url`` and
writes ``*-data`` credentials to temporary files it never deletes. This reader
follows kubectl (client-go ``clientcmd``):

- **Files.** ``--kubeconfig`` names one file, which must exist. Otherwise
  ``$KUBECONFIG`` lists files joined by ``os.pathsep`` (``:``), merged: the first
  file that names a cluster, user or context wins it, and the first file that sets
  ``current-context`` wins that (files that do not exist are skipped); without
  ``$KUBECONFIG``, ``~/.kube/config``. Relative paths in an entry are relative to
  the file that holds the entry.
- **Cluster.** ``server``, ``certificate-authority`` (-data),
  ``insecure-skip-tls-verify``, ``tls-server-name``, ``proxy-url`` (HTTP or HTTPS
  proxy; HTTPS servers are reached through a CONNECT tunnel).
- **User.** ``client-certificate``/``client-key`` (-data), ``token``/``tokenFile``,
  and ``exec`` credential plugins (run once, at load: the ``ExecCredential``'s
  ``token`` or client certificate; ``KUBERNETES_EXEC_INFO`` is set as kubectl does).
- **Key material stays in memory.** ``*-data`` fields are decoded to bytes
  (``ca_data``, ``cert_data``, ``key_data``) and never written by this module; see
  ``RestConfig.ssl_context`` for how they reach the TLS layer.

An ``auth-provider`` or a username/password answers None: the caller falls back to
the ``kubernetes`` package. Anything malformed raises :class:`KubeconfigError` with
a sentence naming the file and the field.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SUPPORTED_USER_KEYS = {"client-certificate", "client-certificate-data", "client-key",
                       "client-key-data", "token", "tokenFile", "exec"}
EXEC_TIMEOUT = 60.0  # seconds an exec credential plugin may take


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used; the message says which file and why."""


@dataclass
class Merged:
    """The kubeconfig files merged: named entries, each with the folder of its file."""

    clusters: dict[str, tuple[dict[str, Any], Path]]
    users: dict[str, tuple[dict[str, Any], Path]]
    contexts: dict[str, dict[str, Any]]
    current_context: str | None
    files: list[Path]


def kubeconfig_paths(path: str | None = None) -> tuple[list[Path], bool]:
    """The files to read and whether each must exist (an explicit path must)."""
    if path:
        return [Path(path).expanduser()], True
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p], False
    return [Path.home() / ".kube" / "config"], True


def _read(file: Path) -> dict[str, Any]:
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise KubeconfigError(f"{file}: no such file") from None
    except IsADirectoryError:
        raise KubeconfigError(f"{file}: is a directory, not a kubeconfig file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise KubeconfigError(f"{file}: cannot read it: {e}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise KubeconfigError(f"{file}: not valid YAML{where}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict) or not ({"clusters", "users", "contexts", "current-context",
                                           "apiVersion", "kind"} & set(doc)):
        raise KubeconfigError(f"{file}: not a kubeconfig (expected a YAML mapping with "
                              f"clusters, users and contexts)")
    return doc


def _entries(doc: dict[str, Any], field: str, file: Path) -> list[tuple[str, dict[str, Any]]]:
    items = doc.get(field) or []
    if not isinstance(items, list):
        raise KubeconfigError(f"{file}: {field} must be a list")
    out = []
    for item in items:
        inner = field[:-1]  # clusters -> cluster
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or \
                not isinstance(item.get(inner) or {}, dict):
            raise KubeconfigError(f"{file}: every entry of {field} needs a name and a "
                                  f"{inner} mapping")
        out.append((item["name"], item.get(inner) or {}))
    return out


def merge(path: str | None = None) -> Merged:
    """The kubeconfig files merged as kubectl merges them (see the module)."""
    files, required = kubeconfig_paths(path)
    m = Merged({}, {}, {}, None, [])
    for file in files:
        if not required and not file.exists():
            continue
        doc = _read(file)
        m.files.append(file)
        base = file.parent
        for name, c in _entries(doc, "clusters", file):
            m.clusters.setdefault(name, (c, base))
        for name, u in _entries(doc, "users", file):
            m.users.setdefault(name, (u, base))
        for name, ctx in _entries(doc, "contexts", file):
            m.contexts.setdefault(name, ctx)
        if not m.current_context and doc.get("current-context"):
            m.current_context = str(doc["current-context"])
    if not m.files:
        raise KubeconfigError("no kubeconfig: none of the files in $KUBECONFIG exists")
    return m


def _context(m: Merged, context: str | None) -> tuple[str, dict[str, Any]]:
    name = context or m.current_context
    where = ", ".join(map(str, m.files))
    if not name:
        raise KubeconfigError(f"{where}: no current-context set; pass --context")
    ctx = m.contexts.get(name)
    if ctx is None:
        known = ", ".join(sorted(m.contexts)) or "none"
        raise KubeconfigError(f"context {name!r} not found in {where} (contexts: {known})")
    return name, ctx


def context_namespace(path: str | None = None, context: str | None = None) -> str | None:
    """The namespace the context sets, or None."""
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST") and \
            not os.environ.get("KUBECONFIG"):
        return None  # in a pod: the caller's default
    _, ctx = _context(merge(path), context)
    return ctx.get("namespace") or None


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"{what} is not valid base64") from None


def _path(base: Path, path: str | None) -> str | None:
    if not path:
        return None
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else base / p)


def load(path: str | None = None, context: str | None = None) -> dict[str, Any] | None:
    """RestConfig fields from the kubeconfig (see the module); None when it needs what
    this reader does not do (an ``auth-provider``, a username and password)."""
    m = merge(path)
    name, ctx = _context(m, context)
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if cluster_name not in m.clusters:
        raise KubeconfigError(f"context {name!r} names cluster {cluster_name!r}, which "
                              f"the kubeconfig does not define")
    cluster, cbase = m.clusters[cluster_name]
    if not cluster.get("server"):
        raise KubeconfigError(f"cluster {cluster_name!r} has no server")
    user, ubase = m.users.get(user_name, ({}, cbase)) if user_name else ({}, cbase)
    if set(user) - SUPPORTED_USER_KEYS:
        return None
    out: dict[str, Any] = {
        "host": str(cluster["server"]).rstrip("/"),
        "ca_file": _path(cbase, cluster.get("certificate-authority")),
        "ca_data": _b64(cluster["certificate-authority-data"],
                        f"cluster {cluster_name!r}: certificate-authority-data")
        if cluster.get("certificate-authority-data") else None,
        "cert_file": _path(ubase, user.get("client-certificate")),
        "key_file": _path(ubase, user.get("client-key")),
        "cert_data": _b64(user["client-certificate-data"],
                          f"user {user_name!r}: client-certificate-data")
        if user.get("client-certificate-data") else None,
        "key_data": _b64(user["client-key-data"], f"user {user_name!r}: client-key-data")
        if user.get("client-key-data") else None,
        "token": user.get("token") or None,
        "token_file": _path(ubase, user.get("tokenFile")) if not user.get("token") else None,
        "verify": not cluster.get("insecure-skip-tls-verify", False),
        "tls_server_name": cluster.get("tls-server-name"),
        "proxy_url": cluster.get("proxy-url") or None,
    }
    if user.get("exec"):
        out.update(exec_credential(user["exec"], ubase, out["host"]))
    return out


def exec_credential(spec: dict[str, Any], base: Path, server: str) -> dict[str, Any]:
    """Runs an exec credential plugin once; its token or client certificate, in memory."""
    command = spec.get("command")
    if not command:
        raise KubeconfigError("exec plugin: command is required")
    if "/" in command and not os.path.isabs(command):
        command = str(base / command)  # relative to the kubeconfig, as client-go does
    env = dict(os.environ)
    for e in spec.get("env") or ():
        env[str(e.get("name"))] = str(e.get("value", ""))
    api_version = spec.get("apiVersion") or "client.authentication.k8s.io/v1"
    info: dict[str, Any] = {"apiVersion": api_version, "kind": "ExecCredential",
                            "spec": {"interactive": False}}
    if spec.get("provideClusterInfo"):
        info["spec"]["cluster"] = {"server": server}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    try:
        run = subprocess.run([command, *map(str, spec.get("args") or ())], env=env,
                             capture_output=True, timeout=EXEC_TIMEOUT, check=False,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KubeconfigError(f"exec plugin {command}: {e}") from None
    if run.returncode != 0:
        why = (run.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        raise KubeconfigError(f"exec plugin {command} exited {run.returncode}: {why}")
    try:
        status = json.loads(run.stdout).get("status") or {}
    except (ValueError, AttributeError):
        raise KubeconfigError(f"exec plugin {command}: its output is not an "
                              f"ExecCredential") from None
    if status.get("token"):
        return {"token": status["token"], "token_file": None}
    if status.get("clientCertificateData") and status.get("clientKeyData"):
        return {"cert_data": status["clientCertificateData"].encode(),
                "key_data": status["clientKeyData"].encode()}
    raise KubeconfigError(f"exec plugin {command}: its ExecCredential has neither a token "
                          f"nor a client certificate and key")
