"""What the tests' small HTTP servers answer with: a JSON body, as the API server
sends one (keep-alive needs its Content-Length)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def reply_json(handler: BaseHTTPRequestHandler, body: Any, code: int = 200,
               headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body).encode()
    handler.send_response(code)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
