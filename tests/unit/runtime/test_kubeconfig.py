"""runtime.kubeconfig: what a kubeconfig says, without the kubernetes package; what
it cannot read falls back (None)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
import yaml

from runtime import RestConfig, kubeconfig


def write(tmp_path: Path, user: dict, cluster: dict | None = None) -> Path:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "k", "cluster": cluster or {
               "server": "https://127.0.0.1:6443/", "certificate-authority": "ca.crt"}}],
           "users": [{"name": "u", "user": user}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}},
                        {"name": "other", "context": {"cluster": "k", "user": "nobody"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_certificates_by_path_relative_to_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, {"client-certificate": "admin.crt", "client-key": "/abs/admin.key"})
    cfg = RestConfig.from_kubeconfig(str(path), qps=7.0)
    assert cfg.host == "https://127.0.0.1:6443"
    assert cfg.ca_file == str(tmp_path / "ca.crt")
    assert cfg.cert_file == str(tmp_path / "admin.crt")
    assert cfg.key_file == "/abs/admin.key"
    assert cfg.qps == 7.0 and cfg.bearer() is None


def test_inline_data_and_a_token(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
    path = write(tmp_path, {"token": "s3cret"},
                 {"server": "https://h:1", "certificate-authority-data":
                  base64.b64encode(pem).decode(), "tls-server-name": "kubernetes"})
    got = kubeconfig.load(str(path))
    assert got is not None
    assert got["ca_data"] == pem and got["ca_file"] is None, "kept in memory, no file"
    assert got["tls_server_name"] == "kubernetes"
    assert RestConfig(**got).bearer() == "Bearer s3cret"


def test_what_it_cannot_read_falls_back_and_what_is_wrong_says_so(tmp_path: Path) -> None:
    provider = {"auth-provider": {"name": "oidc"}}
    assert kubeconfig.load(str(write(tmp_path, provider))) is None
    # a context whose user is not defined: no credentials, as kubectl
    got = kubeconfig.load(str(write(tmp_path, {"token": "t"})), context="other")
    assert got is not None and got["token"] is None
    with pytest.raises(kubeconfig.KubeconfigError, match="context 'missing' not found"):
        kubeconfig.load(str(write(tmp_path, {"token": "t"})), context="missing")


def test_a_token_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    cfg = RestConfig(host="https://h", token_file=str(token))
    assert cfg.bearer() == "Bearer one"
    token.write_text("two\n")
    os.utime(token, (1, 1))  # a different mtime, as a rotation gives
    assert cfg.bearer() == "Bearer two"
