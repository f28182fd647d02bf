from __future__ import annotations

import urllib.error
import urllib.request

import orjson
import pytest

from runtime import errors
from runtime.health import Checks
from runtime.httpserver import HTTPServer, parse_bind_address


def status(code: int, reason: str, message: str) -> bytes:
    return orjson.dumps({"kind": "Status", "code": code, "reason": reason, "message": message})


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (404, "NotFound", errors.NotFound),
        (409, "Conflict", errors.Conflict),
        (409, "AlreadyExists", errors.AlreadyExists),
        (410, "Expired", errors.Gone),
        (403, "Forbidden", errors.Forbidden),
        (422, "Invalid", errors.Invalid),
    ],
)
def test_typed_errors_carry_server_message(code: int, reason: str, cls: type) -> None:
    e = errors.from_status(code, status(code, reason, "the server said so"))
    assert type(e) is cls
    assert e.message == "the server said so" and e.status == code
    assert errors.is_conflict(e) == (cls is errors.Conflict)


def test_bind_address_parsing() -> None:
    assert parse_bind_address("0") is None
    assert parse_bind_address(":8080") == ("0.0.0.0", 8080)
    assert parse_bind_address("127.0.0.1:0") == ("127.0.0.1", 0)


def test_health_server_checks() -> None:
    checks = Checks()
    checks.add("ping", lambda: None)
    state = {"ok": False}
    checks.add("cache", lambda: state["ok"] or "not synced")
    srv = HTTPServer("127.0.0.1:0", {"/readyz": checks.handle})
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}/readyz"
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(url, timeout=5)
        assert ei.value.code == 500 and b"not synced" in ei.value.read()
        state["ok"] = True
        assert urllib.request.urlopen(url, timeout=5).read() == b"ok"
        assert b"[+]cache ok" in urllib.request.urlopen(url + "?verbose", timeout=5).read()
    finally:
        srv.stop()
