"""The HTTPS server: ``POST /mutate`` (AdmissionReview: the seed map's devices),
``POST /route`` (GPU pods to gpu-scheduler: ``routing.py``), ``GET /healthz``.

stdlib ``http.server``, one thread per connection. The listening socket is plain
TCP; each accepted connection is wrapped with the certificate source's *current*
``SSLContext`` in its own thread (so a slow handshake never blocks accepting), which
is how a renewed certificate is picked up without a restart. TLS 1.2 is the minimum.

Bounded, so that a flood cannot exhaust memory or threads:

================================  ==================================================
beyond                            answer
================================  ==================================================
``MAX_BODY`` (what an AdmissionReview of the largest Pod kube-apiserver accepts
can be)                           413 Request Entity Too Large, body discarded unparsed,
                                  connection closed
``max_in_flight`` reviews being   429 Too Many Requests with ``Retry-After: 1``, body
parsed or answered at once        discarded unparsed, connection closed (kube-apiserver
                                  then applies the webhook's failurePolicy; the pod's
                                  controller retries)
``max_connections`` open          the new connection is closed before its TLS
connections                       handshake (a thread per connection is the cost)
================================  ==================================================

A refused body is read and dropped (at most ``DISCARD_MAX`` bytes, within
``READ_TIMEOUT``) after the answer is sent: a client sends its body whole before it
reads, and closing a connection with data unread resets it, which loses the answer.
Whatever the review holds, the answer is an HTTP status or an AdmissionReview: a
review of the wrong shape is a 400 or a refusal that names the field, never a
closed connection.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import structlog

from api.v1alpha1.types import DeviceExposure
from internal.webhook.admission import DEFAULT_SCHEDULER_NAME, BadReview, deny, mutate_review
from internal.webhook.rotation import ServingCerts
from internal.webhook.routing import ROUTE_PATH, route_review
from runtime.httpserver import binding

log = structlog.get_logger("webhook.server")

#: kube-apiserver refuses request bodies over 3 MiB (and etcd objects over 1.5 MiB), so
#: no Pod it admits makes an AdmissionReview larger than this (object + request fields).
MAX_BODY = (3 << 20) + (64 << 10)
HANDSHAKE_TIMEOUT = 10.0
#: a body announced by Content-Length must arrive within this (kube-apiserver sends
#: it at once); a client that sends less holds a connection no longer
READ_TIMEOUT = 5.0
#: a refused body up to this is read and dropped so that its sender gets the answer;
#: beyond it the connection is closed with the body unread
DISCARD_MAX = 16 << 20
DEFAULT_MAX_IN_FLIGHT = 4  # a maximum-size review peaks at ~52 MiB of Python objects
DEFAULT_MAX_CONNECTIONS = 64


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: kube-apiserver reuses connections
    timeout = 60  # idle keep-alive connections are closed after this
    server: _HTTPSServer

    def handle_one_request(self) -> None:
        if self.server.stopping.is_set():
            # Linux still delivers data that arrives after shutdown(SHUT_RD): a
            # request sent after stop() must not be answered by a stopped server.
            self.close_connection = True
            return
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook_http", client=self.client_address[0], line=format % args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        if self.server.stopping.is_set():
            self.send_header("Connection", "close")
            self.close_connection = True
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/healthz", "/readyz"):
            ok = self.server.certs.valid()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            self._send(status, b"ok" if ok else b"serving certificate not valid",
                       "text/plain")
            return
        self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] not in ("/mutate", ROUTE_PATH):
            self._send(HTTPStatus.NOT_FOUND, b"not found", "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length") or -1)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._send(HTTPStatus.LENGTH_REQUIRED, b"a Content-Length is required",
                       "text/plain")
            return
        if length > MAX_BODY:
            self.close_connection = True  # the body is never parsed
            log.warning("webhook_body_too_large", length=length, limit=MAX_BODY)
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                       f"an AdmissionReview is at most {MAX_BODY} bytes (the largest Pod "
                       f"kube-apiserver accepts); got {length}".encode(), "text/plain")
            self._discard(length)
            return
        if not self.server.in_flight.acquire(blocking=False):
            self.close_connection = True  # the body is never parsed
            log.warning("webhook_too_many_requests", limit=self.server.max_in_flight)
            self.send_response(HTTPStatus.TOO_MANY_REQUESTS)
            body = f"more than {self.server.max_in_flight} reviews at once".encode()
            self.send_header("Retry-After", "1")
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self._discard(length)
            return
        try:
            self._review(length)
        finally:
            self.server.in_flight.release()

    def _discard(self, length: int) -> None:
        """Reads and drops the refused body of ``length`` bytes, at most ``DISCARD_MAX``
        and for at most ``READ_TIMEOUT``, so that a client that writes it whole before
        reading gets the answer already sent instead of a reset connection."""
        if length > DISCARD_MAX:
            return
        deadline = time.monotonic() + READ_TIMEOUT
        try:
            while length > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.connection.settimeout(left)
                chunk = self.rfile.read1(min(length, 1 << 16))
                if not chunk:
                    return
                length -= len(chunk)
        except OSError:  # timed out, or the client went away: closed either way
            return

    def _review(self, length: int) -> None:
        self.connection.settimeout(READ_TIMEOUT)
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            raw = b""
        finally:
            self.connection.settimeout(self.timeout)
        if len(raw) < length:
            self.close_connection = True
            log.warning("webhook_short_body", length=length, got=len(raw))
            self._send(HTTPStatus.REQUEST_TIMEOUT,
                       f"the body did not arrive within {READ_TIMEOUT:g}s ({length} bytes "
                       f"announced)".encode(), "text/plain")
            return
        ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip()
        if ctype != "application/json":
            self._send(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, b"want application/json",
                       "text/plain")
            return
        try:
            review = orjson.loads(raw)
            if not isinstance(review, dict):
                raise BadReview("body is not a JSON object")
            if self.path.split("?", 1)[0] == ROUTE_PATH:
                answer = route_review(review, self.server.scheduler_name)
            else:
                answer = mutate_review(review, self.server.default_exposure,
                                       self.server.scheduler_name)
        except (orjson.JSONDecodeError, BadReview) as exc:
            log.warning("webhook_bad_request", error=str(exc))
            self._send(HTTPStatus.BAD_REQUEST, str(exc).encode(), "text/plain")
            return
        except Exception as exc:  # a bug of ours: a denial that says so, never a 500
            log.exception("webhook_internal_error")
            uid = _object(_object(review).get("request")).get("uid")
            if not isinstance(uid, str) or not uid:
                self._send(HTTPStatus.BAD_REQUEST, b"not an AdmissionReview", "text/plain")
                return
            answer = deny(uid, f"the gpu-orchestrator webhook could not read this pod "
                               f"({type(exc).__name__}: {exc}); it is refused rather than "
                               "given devices nobody booked")
        _log_answer(review, answer)
        self._send(HTTPStatus.OK, orjson.dumps(answer))


def _object(value: Any) -> dict[str, Any]:
    """``value`` where it is a JSON object, else an empty one: the log line reads
    whatever shape the review has."""
    return value if isinstance(value, dict) else {}


def _log_answer(review: dict[str, Any], answer: dict[str, Any]) -> None:
    req = _object(review.get("request"))
    resp = answer["response"]
    md = _object(_object(req.get("object")).get("metadata"))
    name = str(md.get("name") or req.get("name") or md.get("generateName") or "")
    if "patch" not in resp and resp.get("allowed") and not resp.get("warnings"):
        return
    log.info("pod_admitted", pod=f"{req.get('namespace', '')}/{name}",
             allowed=resp["allowed"], mutated="patch" in resp,
             message=(resp.get("status") or {}).get("message"),
             warnings=resp.get("warnings"), dry_run=bool(req.get("dryRun")))


class _HTTPSServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], certs: ServingCerts,
                 default_exposure: DeviceExposure, scheduler_name: str,
                 max_in_flight: int, max_connections: int) -> None:
        self.certs = certs
        self.default_exposure = default_exposure
        self.scheduler_name = scheduler_name
        self.max_in_flight = max_in_flight
        self.in_flight = threading.BoundedSemaphore(max_in_flight)
        self.max_connections = max_connections
        self._open = 0  # accepted connections not yet closed (handshaking included)
        self.stopping = threading.Event()
        self._conns: set[ssl.SSLSocket] = set()
        self._conns_lock = threading.Condition()
        super().__init__(addr, _Handler)

    def close_connections(self, timeout: float) -> None:
        """Ends kept-alive connections: the read side of each is shut, so an idle one
        sees EOF at once while one that is answering can still write its response;
        waits up to ``timeout`` seconds for them to be closed."""
        self.stopping.set()
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                # socket.socket.shutdown: on the TCP socket under TLS, not a TLS close.
                socket.socket.shutdown(conn, socket.SHUT_RD)
        with self._conns_lock:
            if not self._conns_lock.wait_for(lambda: not self._conns, timeout):
                log.warning("webhook_connections_still_open", count=len(self._conns))

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-request: not worth a traceback on stderr.
        log.debug("webhook_connection_error", client=client_address[0], exc_info=True)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            full = self._open >= self.max_connections
            if not full:
                self._open += 1
        if full:
            log.warning("webhook_too_many_connections", limit=self.max_connections,
                        client=client_address[0])
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._conns_lock:
                self._open -= 1

    def finish_request(self, request: Any, client_address: Any) -> None:
        sock: socket.socket = request
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            tls = self.certs.ssl_context().wrap_socket(sock, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("webhook_tls_handshake_failed", client=client_address[0], error=str(exc))
            return
        with self._conns_lock:
            self._conns.add(tls)
        try:
            if not self.stopping.is_set():
                self.RequestHandlerClass(tls, client_address, self)
        finally:
            tls.close()
            with self._conns_lock:
                self._conns.discard(tls)
                self._conns_lock.notify_all()


class WebhookServer:
    """The server on ``host:port`` (port 0: a free one, see :attr:`port`)."""

    def __init__(self, certs: ServingCerts, host: str = "0.0.0.0", port: int = 9443,
                 default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES,
                 *, scheduler_name: str = DEFAULT_SCHEDULER_NAME,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        if max_in_flight < 1 or max_connections < 1:
            raise ValueError("max_in_flight and max_connections must be at least 1")
        self._httpd = binding("webhook", (host, port), lambda: _HTTPSServer(
            (host, port), certs, default_exposure, scheduler_name, max_in_flight,
            max_connections))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    def serve_forever(self) -> None:
        log.info("webhook_serving", address=f"{self.host}:{self.port}")
        self._httpd.serve_forever(poll_interval=0.5)

    def start(self) -> None:
        """Serves in a background thread."""
        self._thread = threading.Thread(target=self.serve_forever, name="webhook-server",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stops accepting, closes the listening socket and the kept-alive connections;
        requests being answered finish."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout)
            self._thread = None
        self._httpd.server_close()
        self._httpd.close_connections(timeout)
        log.info("webhook_stopped", address=f"{self.host}:{self.port}")
