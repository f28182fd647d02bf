"""The client's own kept-alive connections to one API server, answers read by ``http.client``.

:class:`ConnectionPool` sends one request and reads its whole answer (``request``):
the client's unary calls (get, list, create, patch, ...). urllib3's ``urlopen`` did
the same in about 150 µs of the client's CPU per request, ``http.client`` on a
kept-alive connection in about 80 (``python -m bench.hotpath http``); each unit of
work costs about three such requests. Watches, and every request through a proxy,
stay on urllib3 (``runtime/client.py``).

The request's head is written here, in one piece with its body (one ``sendall``:
``http.client.HTTPConnection`` checks and encodes each header line on its own, a fifth
of what was left, and sends head and body apart); a value or path with a control
character is refused (``ValueError``), as ``http.client`` refuses it. The answer is
read by ``http.client``'s own ``HTTPResponse`` (status line, headers, Content-Length
or chunked body, keep-alive), as :class:`runtime.httpheaders.Response`.

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
host).
"""

from __future__ import annotations

import http.client
import re
import select
import socket
import ssl
import threading
import time
from typing import Any, NamedTuple

from runtime import httpheaders

#: what a path may not hold (``http.client``'s own check: controls, space, DEL)
_BAD_PATH = re.compile("[\x00-\x20\x7f]")
#: what a header value may not hold: a control character but tab (a CR or LF would
#: start another header)
_BAD_VALUE = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class TransportFailure(Exception):
    """No HTTP answer; ``reason`` is one of the module's four."""

    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason


class Answer(NamedTuple):
    status: int
    headers: Any  # http.client.HTTPMessage
    data: bytes


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
        try:
            name = host.encode("ascii").decode()
        except UnicodeEncodeError:
            name = host.encode("idna").decode()
        if ":" in name:  # IPv6, bracketed as in a URL
            name = f"[{name.partition('%')[0]}]"
        default = 443 if context is not None else 80
        #: the head's first lines after the request line (http.client's own)
        self._fixed = (f"Host: {name if port == default else f'{name}:{port}'}\r\n"
                       "Accept-Encoding: identity\r\n")
        self._lock = threading.Lock()  # guards _idle
        self._idle: list[socket.socket] = []

    def request(self, method: str, path: str, body: bytes | None,
                headers: dict[str, Any], timeout: float | None) -> Answer:
        """Send one request and read its whole answer. ``headers``' list values are
        sent as one header line per item."""
        head = self._head(method, path, body, headers)
        deadline = None if timeout is None else time.monotonic() + timeout
        sock = self._take(deadline)
        try:
            sock.settimeout(_left(deadline))
            sock.sendall(head + body if body else head)
            sock.settimeout(_left(deadline))
            resp = httpheaders.Response(sock, method=method)
            resp.begin()
            sock.settimeout(_left(deadline))
            data = resp.read()
        except TimeoutError as e:
            sock.close()
            raise TransportFailure(
                "ReadTimeout", f"{self._where()}: no answer within {timeout}s: {e}") from e
        except (OSError, http.client.HTTPException) as e:
            sock.close()
            raise TransportFailure(
                "TransportError", f"{self._where()}: {type(e).__name__}: {e}") from e
        except BaseException:
            sock.close()
            raise
        if resp.will_close or not resp.isclosed():
            resp.close()
            sock.close()
        else:
            self._give_back(sock)
        return Answer(resp.status, resp.headers, data)

    def clear(self) -> None:
        """Close every idle connection (those in use close or come back later)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    # ------------------------------------------------------------------ internals
    def _head(self, method: str, path: str, body: bytes | None,
              headers: dict[str, Any]) -> bytes:
        if _BAD_PATH.search(path):
            raise ValueError(f"a request path may hold no control character or space: "
                             f"{path!r}")
        lines = [f"{method} {path} HTTP/1.1\r\n", self._fixed]
        for name, value in headers.items():
            for item in value if isinstance(value, list) else (value,):
                item = str(item)
                if _BAD_VALUE.search(item):
                    raise ValueError(f"header {name} may hold no control character")
                lines.append(f"{name}: {item}\r\n")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}\r\n")
        elif method in _BODY_METHODS:
            lines.append("Content-Length: 0\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")

    def _take(self, deadline: float | None) -> socket.socket:
        while True:
            with self._lock:
                sock = self._idle.pop() if self._idle else None
            if sock is None:
                return self._open(deadline)
            if not _dropped(sock):
                return sock
            sock.close()

    def _give_back(self, sock: socket.socket) -> None:
        with self._lock:
            if len(self._idle) < self.maxsize:
                self._idle.append(sock)
                return
        sock.close()

    def _open(self, deadline: float | None) -> socket.socket:
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
        return sock

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


def _dropped(sock: socket.socket) -> bool:
    """Is this idle connection unusable? An idle socket that is readable holds the
    server's close (or bytes nobody asked for): either way it cannot carry a request."""
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True
