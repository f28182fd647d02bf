"""The client's own kept-alive connections to one API server, on ``http.client``.

:class:`ConnectionPool` sends one request and reads its whole answer (``request``):
the client's unary calls (get, list, create, patch, ...). urllib3's ``urlopen`` did
the same in about 150 µs of the client's CPU per request, ``http.client`` on a
kept-alive connection in about 80 (``python -m bench.hotpath http``); each unit of
work costs about three such requests. Watches, and every request through a proxy,
stay on urllib3 (``runtime/client.py``).

Guarantees:

* **Reuse, never waiting.** Idle connections are kept last-in first-out, at most
  ``maxsize`` of them; a request finding none idle opens another at once (no thread
  waits for a connection), and a connection handed back to a full pool is closed.
  So no more connections stay open than threads sent requests at the same time.
* **A connection the server closed while idle fails no request.** Before reuse a
  connection is polled: readable (the server's FIN, a TLS close_notify, bytes nobody
  asked for) or broken, it is closed and the next one taken or a new one opened.
* **Only a clean connection goes back.** One whose request raised, whose answer said
  ``Connection: close`` or was not read to its end, is closed, never reused.
* **One deadline.** ``timeout`` (seconds, ``None``: none) bounds connect, TLS
  handshake, send and read together: the socket's timeout is set to what is left
  before each step.
* **Failures say whether the request left.** A request that got no answer raises
  :class:`TransportFailure` with the reason :mod:`runtime.retry` reads:

  =====================  ===========================================  =============
  reason                 when                                         request sent?
  =====================  ===========================================  =============
  ``ConnectionRefused``  the TCP connection could not be made          no
  ``ConnectTimeout``     no TCP connection or TLS handshake in time    no
  ``ReadTimeout``        no whole answer in time after it was sent     maybe
  ``TransportError``     anything else: TLS refused (a certificate),   maybe
                         reset, broken pipe, bad status line, cut body
  =====================  ===========================================  =============

  A TLS failure other than a timeout is a ``TransportError``, as urllib3 reported
  it: a wrong CA is no reason to send a create again.

TLS: the caller's ``ssl.SSLContext`` (credentials already in it), the socket wrapped
with ``server_hostname`` (the kubeconfig's ``tls-server-name`` where set, else the
host). Answers are read by :class:`runtime.httpheaders.Response` (headers without the
``email`` package).
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
from typing import Any, NamedTuple

from runtime import httpheaders


class TransportFailure(Exception):
    """No HTTP answer; ``reason`` is one of the module's four."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason


class Answer(NamedTuple):
    status: int
    headers: Any  # http.client.HTTPMessage
    data: bytes


class _Connection(http.client.HTTPConnection):
    """A connection whose socket the pool opens; it never reconnects by itself (a
    plain-text reconnect to a TLS port, or a silent second TCP connection)."""

    response_class = httpheaders.Response
    auto_open = 0


class ConnectionPool:
    """Kept-alive connections to ``host:port``, TLS when ``context`` is given."""

    def __init__(self, host: str, port: int, *, maxsize: int,
                 context: ssl.SSLContext | None = None,
                 server_hostname: str | None = None) -> None:
        self.host = host
        self.port = port
        self.maxsize = maxsize
        self._context = context
        self._server_hostname = server_hostname or host
        self._lock = threading.Lock()  # guards _idle
        self._idle: list[_Connection] = []

    def request(self, method: str, path: str, body: bytes | None,
                headers: dict[str, Any], timeout: float | None) -> Answer:
        """Send one request and read its whole answer. ``headers``' list values are
        sent as one header line per item."""
        deadline = None if timeout is None else time.monotonic() + timeout
        conn = self._take(deadline)
        sock = conn.sock
        try:
            sock.settimeout(_left(deadline))
            conn.putrequest(method, path)
            for name, value in headers.items():
                if isinstance(value, list):
                    for item in value:
                        conn.putheader(name, item)
                else:
                    conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            elif method in ("POST", "PUT", "PATCH"):
                conn.putheader("Content-Length", "0")
            conn.endheaders(body)
            sock.settimeout(_left(deadline))
            resp = conn.getresponse()
            sock.settimeout(_left(deadline))
            data = resp.read()
        except TimeoutError as e:
            conn.close()
            raise TransportFailure(
                "ReadTimeout", f"{self._where()}: no answer within {timeout}s: {e}") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportFailure(
                "TransportError", f"{self._where()}: {type(e).__name__}: {e}") from e
        except BaseException:
            conn.close()
            raise
        if resp.will_close or not resp.isclosed():
            conn.close()
        else:
            self._give_back(conn)
        return Answer(resp.status, resp.headers, data)

    def clear(self) -> None:
        """Close every idle connection (those in use close or come back later)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    # ------------------------------------------------------------------ internals
    def _take(self, deadline: float | None) -> _Connection:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._open(deadline)
            if not _dropped(conn.sock):
                return conn
            conn.close()

    def _give_back(self, conn: _Connection) -> None:
        with self._lock:
            if len(self._idle) < self.maxsize:
                self._idle.append(conn)
                return
        conn.close()

    def _open(self, deadline: float | None) -> _Connection:
        try:
            left = _left(deadline)
        except TimeoutError as e:
            raise TransportFailure("ConnectTimeout", f"{self._where()}: {e}") from e
        try:
            sock = socket.create_connection((self.host, self.port), left)
        except TimeoutError as e:
            raise TransportFailure(
                "ConnectTimeout", f"{self._where()}: could not connect in time: {e}") from e
        except OSError as e:
            raise TransportFailure(
                "ConnectionRefused", f"{self._where()}: could not connect: {e}") from e
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._context is not None:
                sock.settimeout(_left(deadline))
                sock = self._context.wrap_socket(sock, server_hostname=self._server_hostname)
        except TimeoutError as e:
            sock.close()
            raise TransportFailure(
                "ConnectTimeout", f"{self._where()}: no TLS handshake in time: {e}") from e
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            sock.close()
            raise TransportFailure(
                "TransportError", f"{self._where()}: TLS: {type(e).__name__}: {e}") from e
        conn = _Connection(self.host, self.port)
        if self._context is not None:
            conn.default_port = 443  # the Host header names the port as for https://
        conn.sock = sock
        return conn

    def _where(self) -> str:
        scheme = "https" if self._context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"


def _left(deadline: float | None) -> float | None:
    """The seconds left before ``deadline``; ``TimeoutError`` when none are."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's timeout passed")
    return left


def _dropped(sock: socket.socket | None) -> bool:
    """Is this idle connection unusable? An idle socket that is readable holds the
    server's close (or bytes nobody asked for): either way it cannot carry a request."""
    if sock is None:
        return True
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True
