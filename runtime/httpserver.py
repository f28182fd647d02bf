"""A tiny threaded HTTP server for ``/metrics``, ``/healthz`` and ``/readyz``.

``authorize(headers, path)``, when given, runs before every route: a (status,
message) it returns is sent instead (see :mod:`runtime.metrics_auth`). ``tls``, when
given, serves HTTPS: each connection's handshake runs in its own thread (bounded by
``HANDSHAKE_TIMEOUT``), so a slow client never blocks accepting."""

from __future__ import annotations

import contextlib
import errno
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

log = structlog.get_logger("runtime.httpserver")

Route = Callable[[str], tuple[int, str, bytes]]  # query -> (status, content type, body)
HANDSHAKE_TIMEOUT = 10.0
#: (request headers, path) -> None to serve, or (status, message) to refuse
Authorize = Callable[[Mapping[str, str], str], tuple[int, str] | None]


class AddressInUse(RuntimeError):
    """The address a server should listen on is taken (another manager, webhook or
    agent on this host): said in one line, not an OSError traceback."""


def binding(what: str, addr: tuple[str, int], make: Callable[[], Any]) -> Any:
    """``make()`` (a server that binds ``addr``), or AddressInUse naming it."""
    try:
        return make()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        host = addr[0] or "0.0.0.0"
        raise AddressInUse(f"cannot listen on {host}:{addr[1]} ({what}): the address is "
                           "already in use (is another gpu-orchestrator process running?)"
                           ) from None


def parse_bind_address(addr: str | None) -> tuple[str, int] | None:
    """``"0"``/``""``/None disable; ``":8080"`` is all interfaces; ``"127.0.0.1:0"`` a free port."""
    if addr is None or addr in ("", "0"):
        return None
    host, _, port = addr.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class _TLSServer(ThreadingHTTPServer):
    """Wraps each accepted connection in TLS in the connection's own thread."""

    tls: ssl.SSLContext

    def finish_request(self, request: Any, client_address: Any) -> None:
        sock: socket.socket = request
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            conn = self.tls.wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            conn.settimeout(60)
            self.RequestHandlerClass(conn, client_address, self)
        finally:
            with contextlib.suppress(OSError):
                conn.close()


class HTTPServer:
    def __init__(self, bind_address: str, routes: dict[str, Route], name: str = "http",
                 authorize: Authorize | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        parsed = parse_bind_address(bind_address)
        if parsed is None:
            raise ValueError("server disabled by bind address")
        self.name = name
        self.routes = routes
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                route = server.routes.get(path)
                if route is None:
                    # /healthz/<check> and the like
                    base = path.rsplit("/", 1)[0]
                    route = server.routes.get(base)
                    query = f"check={path.rsplit('/', 1)[1]}&{query}" if route else query
                refused = None if authorize is None else authorize(self.headers, path)
                if refused is not None:
                    status, ctype, body = refused[0], "text/plain", f"{refused[1]}\n".encode()
                elif route is None:
                    status, ctype, body = 404, "text/plain", b"not found\n"
                else:
                    try:
                        status, ctype, body = route(query)
                    except Exception as e:
                        status, ctype, body = 500, "text/plain", f"{e}\n".encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        if tls is None:
            self._httpd = binding(name, parsed, lambda: ThreadingHTTPServer(parsed, Handler))
        else:
            self._httpd = binding(name, parsed, lambda: _TLSServer(parsed, Handler))
            self._httpd.tls = tls
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=self.name,
            daemon=True,
        )
        self._thread.start()
        log.info("httpserver.started", server=self.name, address=f"{self.host}:{self.port}")

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
        self._httpd.server_close()
