"""A kubeconfig as kubectl reads it, against a TLS server on 127.0.0.1: credentials
from ``*-data`` fields used from memory (no file left anywhere), the cluster's
``proxy-url`` honoured (a CONNECT proxy that counts its tunnels), files of
``$KUBECONFIG`` merged, an exec credential plugin run."""

from __future__ import annotations

import base64
import os
import select
import socket
import ssl
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from hack.testenv.pki import CertificateAuthority
from runtime import Client, RestConfig
from runtime.kubeconfig import KubeconfigError, load
from tests.http_replies import reply_json


class Api(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None, str | None]] = []  # (path, client CN, Authorization)

    def do_GET(self) -> None:
        cert = self.connection.getpeercert() if hasattr(self.connection, "getpeercert") \
            else None
        cn = None
        for rdn in (cert or {}).get("subject", ()):
            for k, v in rdn:
                if k == "commonName":
                    cn = v
        Api.seen.append((self.path, cn, self.headers.get("Authorization")))
        reply_json(self, {"kind": "APIVersions", "versions": ["v1"]})

    def log_message(self, *_a: object) -> None:
        pass


class Connect(BaseHTTPRequestHandler):
    """An HTTP CONNECT proxy: counts tunnels, copies bytes both ways."""

    tunnels: list[str] = []

    def do_CONNECT(self) -> None:
        Connect.tunnels.append(self.path)
        host, _, port = self.path.rpartition(":")
        upstream = socket.create_connection((host, int(port)), timeout=10)
        self.send_response(200, "Connection established")
        self.end_headers()
        conns = [self.connection, upstream]
        try:
            while True:
                ready, _, _ = select.select(conns, [], [], 10)
                if not ready:
                    return
                for c in ready:
                    data = c.recv(65536)
                    if not data:
                        return
                    (upstream if c is self.connection else self.connection).sendall(data)
        finally:
            upstream.close()

    def log_message(self, *_a: object) -> None:
        pass


def serve(server: ThreadingHTTPServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return t


@pytest.fixture
def pki(tmp_path: Path) -> tuple[CertificateAuthority, Path, Path, Path]:
    ca = CertificateAuthority(tmp_path / "pki")
    server = ca.issue("server", "127.0.0.1", server=True, ips=("127.0.0.1",))
    client = ca.issue("client", "kubectl-gpu-user")
    return ca, server.cert, client.cert, client.key


@pytest.fixture
def api(pki: tuple) -> Iterator[str]:
    ca, server_cert, *_ = pki
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(server_cert, server_cert.with_suffix(".key"))
    ctx.load_verify_locations(ca.cert_path)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    Api.seen = []
    serve(httpd)
    yield f"https://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def proxy() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Connect)
    Connect.tunnels = []
    serve(httpd)
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(tmp: Path, server: str, pki: tuple, **cluster: str) -> Path:
    ca, _, cert, key = pki
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "k", "cluster": {
               "server": server, "certificate-authority-data": b64(ca.cert_path), **cluster}}],
           "users": [{"name": "u", "user": {"client-certificate-data": b64(cert),
                                            "client-key-data": b64(key)}}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    path = tmp / "config"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temp folder every library would write to, watched for leftovers."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    monkeypatch.setenv("TMPDIR", str(d))
    return d


def test_data_credentials_are_used_from_memory_and_no_file_is_left(
        tmp_path: Path, pki: tuple, api: str, private_tmp: Path) -> None:
    path = kubeconfig(tmp_path, api, pki)
    before = set(os.listdir(tmp_path))
    cfg = RestConfig.from_kubeconfig(str(path))
    assert (cfg.ca_file, cfg.cert_file, cfg.key_file) == (None, None, None)
    got = Client(cfg).request("GET", "/api")
    assert got["kind"] == "APIVersions"
    assert Api.seen == [("/api", "kubectl-gpu-user", None)], "the client certificate was used"
    assert list(private_tmp.iterdir()) == [], "nothing written to the temp folder"
    assert set(os.listdir(tmp_path)) == before, "nothing written beside the kubeconfig"


def test_proxy_url_is_honoured(tmp_path: Path, pki: tuple, api: str, proxy: str) -> None:
    path = kubeconfig(tmp_path, api, pki, **{"proxy-url": proxy})
    client = Client(RestConfig.from_kubeconfig(str(path)))
    client.request("GET", "/api")
    client.request("GET", "/apis")
    assert Connect.tunnels and Connect.tunnels[0] == api.removeprefix("https://")
    assert [p for p, *_ in Api.seen] == ["/api", "/apis"]


def test_without_proxy_url_no_tunnel(tmp_path: Path, pki: tuple, api: str, proxy: str) -> None:
    Client(RestConfig.from_kubeconfig(str(kubeconfig(tmp_path, api, pki)))).request("GET", "/api")
    assert Connect.tunnels == []


def test_merged_kubeconfig_files_first_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.write_text(yaml.safe_dump({"current-context": "ca", "contexts": [
        {"name": "ca", "context": {"cluster": "shared", "user": "ub", "namespace": "team"}}],
        "clusters": [{"name": "shared", "cluster": {"server": "https://first:6443"}}]}))
    b.write_text(yaml.safe_dump({"current-context": "cb", "clusters": [
        {"name": "shared", "cluster": {"server": "https://second:6443"}}],
        "users": [{"name": "ub", "user": {"token": "from-b"}}]}))
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(a), str(tmp_path / "absent"),
                                                      str(b)]))
    got = load()
    assert got is not None
    assert got["host"] == "https://first:6443" and got["token"] == "from-b"
    from runtime.kubeconfig import context_namespace

    assert context_namespace() == "team"


def test_exec_plugin_token(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        f"#!{sys.executable}\nimport json, os\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',\n"
        "                  'status': {'token': 'tok-' + os.environ['WHO']}}))\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    doc = {"current-context": "c",
           "clusters": [{"name": "k", "cluster": {"server": "https://h:1"}}],
           "users": [{"name": "u", "user": {"exec": {
               "apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin.py",
               "env": [{"name": "WHO", "value": "me"}]}}}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    (tmp_path / "config").write_text(yaml.safe_dump(doc))
    cfg = RestConfig.from_kubeconfig(str(tmp_path / "config"))
    assert cfg.bearer() == "Bearer tok-me"


@pytest.mark.parametrize(("content", "message"), [
    ("root:x:0:0:root:/root:/bin/bash\n", "not a kubeconfig"),
    ("a: [1,\n", "not valid YAML (line 2)"),
    ("current-context: nope\ncontexts: []\n", "context 'nope' not found"),
    ("contexts: 3\n", "contexts must be a list"),
])
def test_a_file_that_is_no_kubeconfig_says_so(tmp_path: Path, content: str,
                                              message: str) -> None:
    path = tmp_path / "config"
    path.write_text(content)
    with pytest.raises(KubeconfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(str(path))
