"""A fault-injecting HTTPS proxy between a client under test and kube-apiserver.

It listens on 127.0.0.1 with a serving certificate of the control plane's CA and
forwards every request to kube-apiserver as the admin (client certificate), passing the
client's own headers through (so ``Impersonate-User`` still makes the request the
controller's ServiceAccount's). One request per connection (``Connection: close``), so
every request meets the rules afresh.

Faults are :class:`Rule` objects; the first rule that matches a request and still has
``times`` left (and wins its ``probability`` draw, from a seeded RNG) acts on it:

=================  ==========================================================================
action             what the client sees
=================  ==========================================================================
``status``         an answer of ``code`` (429, 500, 503...) with ``Retry-After`` if given and
                   a ``Status`` body, or ``body``/``content_type`` (an HTML 502 page); the
                   request never reaches the server
``reset``          the connection reset (TCP RST) before the request is forwarded
``lose_answer``    the request *is* applied by the server, then the connection is reset
                   before the answer (a create that landed but whose answer was lost)
``stall``          nothing for ``seconds``, then the real answer (or a reset, if the client
                   gave up)
``truncate``       the real answer's status and headers, and half its body, then a close;
                   for a watch, half of its first chunk, then a clean end: a line cut short
``drop_watch``     a watch forwarded for ``seconds``, then cut (a reset without the last
                   chunk, so the client sees a broken stream, not a normal end)
=================  ==========================================================================

:meth:`FaultProxy.drop_watches` cuts every open watch at once. ``counts`` says how many
times each action was applied, so a test can check its faults really happened.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import ssl
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import pki

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length",
               "proxy-connection", "te", "upgrade", "trailer"}

HTML_502 = (b"<html><head><title>502 Bad Gateway</title></head><body>"
            b"<center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center>"
            b"</body></html>\n")


@dataclass
class Rule:
    action: str  # status | reset | lose_answer | stall | truncate | drop_watch
    methods: frozenset[str] = frozenset()  # empty: any
    path: str = ""  # substring of the path (with query); empty: any
    watch: bool | None = None  # True: only watches; False: never watches; None: both
    code: int = 503
    retry_after: int | None = None
    body: bytes | None = None
    content_type: str = "application/json"
    seconds: float = 0.0
    times: int | None = None  # None: until removed
    probability: float = 1.0

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        if self.methods and method not in self.methods:
            return False
        if self.path and self.path not in path:
            return False
        return self.watch is None or self.watch == is_watch


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    watch: bool = False
    cut: threading.Event = field(default_factory=threading.Event)
    upstream: http.client.HTTPSConnection | None = None

    def cut_now(self) -> None:
        """Reset the client's connection and drop the upstream one."""
        self.cut.set()
        _reset(self.sock)
        if self.upstream is not None and self.upstream.sock is not None:
            with contextlib.suppress(OSError):
                self.upstream.sock.shutdown(socket.SHUT_RDWR)


class FaultProxy:
    def __init__(self, upstream_port: int, ca: pki.CertificateAuthority,
                 client_cert: pki.Pair, workdir: Path, seed: int = 1) -> None:
        self.upstream_port = upstream_port
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ca = ca
        serving = ca.issue("faultproxy", "faultproxy", server=True, dns=("localhost",),
                           ips=("127.0.0.1",))
        self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_ctx.load_cert_chain(str(serving.cert), str(serving.key))
        self._upstream_ctx = ssl.create_default_context(cafile=str(ca.cert_path))
        self._upstream_ctx.load_cert_chain(str(client_cert.cert), str(client_cert.key))
        self._client_cert = client_cert
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.rules: list[Rule] = []
        self.counts: dict[str, int] = {}
        self.requests = 0
        self._conns: set[_Conn] = set()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self.port = 0

    # ---- lifecycle -------------------------------------------------------------------

    def start(self) -> FaultProxy:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", 0))
        ls.listen(256)
        self._listener = ls
        self.port = ls.getsockname()[1]
        threading.Thread(target=self._accept, name="faultproxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        self.drop_watches()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path | None = None) -> Path:
        """A kubeconfig (admin) whose server is this proxy."""
        path = path or self.workdir / "kubeconfig-faultproxy"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "faultproxy",
            "clusters": [{"name": "faultproxy", "cluster": {
                "server": self.url, "certificate-authority": str(self.ca.cert_path)}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(self._client_cert.cert),
                "client-key": str(self._client_cert.key)}}],
            "contexts": [{"name": "faultproxy", "context": {
                "cluster": "faultproxy", "user": "admin", "namespace": "default"}}],
        }, indent=2))
        return path

    # ---- commands --------------------------------------------------------------------

    def add(self, *rules: Rule) -> None:
        with self._lock:
            self.rules.extend(rules)

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def drop_watches(self) -> int:
        """Cuts every open watch stream now; returns how many."""
        with self._lock:
            watches = [c for c in self._conns if c.watch]
        for c in watches:
            c.cut_now()
        self._count("drop_watch", len(watches))
        return len(watches)

    def count(self, action: str) -> int:
        with self._lock:
            return self.counts.get(action, 0)

    def _count(self, action: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self.counts[action] = self.counts.get(action, 0) + n

    def _pick(self, method: str, path: str, is_watch: bool) -> Rule | None:
        with self._lock:
            self.requests += 1
            for r in self.rules:
                if r.times is not None and r.times <= 0:
                    continue
                if not r.matches(method, path, is_watch):
                    continue
                if r.probability < 1.0 and self._rng.random() >= r.probability:
                    continue
                if r.times is not None:
                    r.times -= 1
                self.counts[r.action] = self.counts.get(r.action, 0) + 1
                return r
        return None

    # ---- serving ---------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        conn = _Conn(raw)
        with self._lock:
            self._conns.add(conn)
        try:
            raw.settimeout(60)
            tls = self._server_ctx.wrap_socket(raw, server_side=True)
            conn.sock = tls
            self._one_request(conn)
        except (OSError, ssl.SSLError, http.client.HTTPException, ValueError):
            pass
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.sock.close()

    def _one_request(self, conn: _Conn) -> None:
        rfile = conn.sock.makefile("rb")
        line = rfile.readline(65537).decode("latin-1").rstrip("\r\n")
        if not line:
            return
        method, target, _ = line.split(" ", 2)
        headers = http.client.parse_headers(rfile)
        length = int(headers.get("Content-Length") or 0)
        body = rfile.read(length) if length else None
        is_watch = "watch=1" in target or "watch=true" in target
        conn.watch = is_watch
        rule = self._pick(method, target, is_watch)
        action = rule.action if rule else ""
        if action == "status":
            assert rule is not None
            self._answer(conn.sock, rule)
            return
        if action == "reset":
            _reset(conn.sock)
            return
        if action == "stall":
            assert rule is not None
            if self._stop.wait(rule.seconds) or conn.cut.is_set():
                return
        upstream = http.client.HTTPSConnection("127.0.0.1", self.upstream_port,
                                               context=self._upstream_ctx,
                                               timeout=None if is_watch else 60)
        conn.upstream = upstream
        try:
            fwd = {k: v for k, v in headers.items() if k.lower() not in HOP_HEADERS}
            upstream.request(method, target, body=body, headers=fwd)
            resp = upstream.getresponse()
            if action == "lose_answer":
                resp.read()
                _reset(conn.sock)
                return
            head = [f"HTTP/1.1 {resp.status} {resp.reason}"]
            head += [f"{k}: {v}" for k, v in resp.getheaders() if k.lower() not in HOP_HEADERS]
            head.append("Connection: close")
            if is_watch:  # chunked, so a cut stream (no last chunk) is visibly broken
                head.append("Transfer-Encoding: chunked")
            conn.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            if is_watch:
                assert rule is not None or not action
                self._stream(conn, resp, rule.seconds if action == "drop_watch" and rule else None,
                             truncate=action == "truncate")
                return
            data = resp.read()
            if action == "truncate":
                data = data[: max(1, len(data) // 2)]
            conn.sock.sendall(data)
        finally:
            upstream.close()

    def _stream(self, conn: _Conn, resp: http.client.HTTPResponse,
                cut_after: float | None, truncate: bool = False) -> None:
        """Forwards a watch until it ends, is cut by a command, or ``cut_after`` passes
        (the client gets a reset). With ``truncate`` the first event is sent half, then
        the stream ends cleanly: a line cut short."""
        timer = None
        if cut_after is not None:
            timer = threading.Timer(cut_after, conn.cut_now)
            timer.daemon = True
            timer.start()
        try:
            while not conn.cut.is_set() and not self._stop.is_set():
                chunk = resp.read1(65536)
                if conn.cut.is_set():
                    return
                if not chunk:
                    conn.sock.sendall(b"0\r\n\r\n")  # the server ended it: end it cleanly
                    return
                if truncate:
                    half = chunk[: max(1, len(chunk) // 2)]
                    conn.sock.sendall(_chunk(half) + b"0\r\n\r\n")
                    return
                conn.sock.sendall(_chunk(chunk))
        finally:
            if timer is not None:
                timer.cancel()

    def _answer(self, sock: socket.socket, rule: Rule) -> None:
        if rule.body is not None:
            body, ctype = rule.body, rule.content_type
        else:
            body = json.dumps({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": f"injected by faultproxy: {rule.code}",
                "reason": {429: "TooManyRequests", 500: "InternalError",
                           503: "ServiceUnavailable"}.get(rule.code, ""),
                "code": rule.code,
                **({"details": {"retryAfterSeconds": rule.retry_after}}
                   if rule.retry_after is not None else {}),
            }).encode()
            ctype = "application/json"
        reason = http.client.responses.get(rule.code, "Error")
        head = [f"HTTP/1.1 {rule.code} {reason}", f"Content-Type: {ctype}",
                f"Content-Length: {len(body)}", "Connection: close"]
        if rule.retry_after is not None:
            head.append(f"Retry-After: {rule.retry_after}")
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _reset(sock: socket.socket) -> None:
    """Closes with SO_LINGER 0: the peer gets a TCP RST, not a clean FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
