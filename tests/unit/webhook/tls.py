"""A TLS client socket to a webhook server on 127.0.0.1 (its self-signed cert not
checked), for the tests that speak HTTP to it byte by byte."""

from __future__ import annotations

import socket
import ssl


def connect(port: int) -> ssl.SSLSocket:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw)
