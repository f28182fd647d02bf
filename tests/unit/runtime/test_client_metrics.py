"""The client's request metrics: every attempt counted by code, method and host, and
timed, with the metrics' children looked up once per label set (``labels()``
validated and locked three times a request, a few percent of the client's CPU)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runtime import Client, RestConfig, errors, metrics
from tests.http_replies import reply_json


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.endswith("/missing"):
            reply_json(self, {"kind": "Status", "code": 404, "reason": "NotFound"}, 404)
        else:
            reply_json(self, {"kind": "Pod", "metadata": {"name": "p"}})

    def log_message(self, *_a: object) -> None:
        pass


@pytest.fixture
def host() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    t.join(10)


def _value(metric: Any, suffix: str, **labels: str) -> float:
    for family in metric.collect():
        for s in family.samples:
            if s.name.endswith(suffix) and s.labels == labels:
                return s.value
    return 0.0


def test_each_attempt_is_counted_and_timed_per_host(host: str) -> None:
    netloc = host.removeprefix("http://")
    c = Client(RestConfig(host=host, qps=1000, burst=1000))
    # a host's series may exist already (an earlier test's server on the same port):
    # every count is read as a difference
    def counts() -> tuple[float, ...]:
        return (_value(metrics.rest_client_requests_total, "_total", code="200", method="GET",
                       host=netloc),
                _value(metrics.rest_client_requests_total, "_total", code="404", method="GET",
                       host=netloc),
                _value(metrics.rest_client_request_duration_seconds, "_count", verb="GET",
                       host=netloc),
                _value(metrics.rest_client_rate_limiter_duration_seconds, "_count",
                       verb="GET", host=netloc))
    before = counts()
    for _ in range(5):
        c.request("GET", "/api/v1/namespaces/d/pods/p")
    with pytest.raises(errors.NotFound):
        c.request("GET", "/api/v1/namespaces/d/pods/missing")
    assert tuple(a - b for a, b in zip(counts(), before, strict=True)) == (5, 1, 6, 6)


def test_the_metrics_children_are_looked_up_once(host: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    c = Client(RestConfig(host=host, qps=1000, burst=1000))
    calls: list[tuple[str, ...]] = []
    for m in (metrics.rest_client_requests_total, metrics.rest_client_request_duration_seconds,
              metrics.rest_client_rate_limiter_duration_seconds):
        real = m.labels

        def counting(*values: str, _real: Any = real) -> Any:
            calls.append(values)
            return _real(*values)

        monkeypatch.setattr(m, "labels", counting)
    for _ in range(20):
        c.request("GET", "/api/v1/namespaces/d/pods/p")
    assert len(calls) == 3  # one per metric, not three per request (60)
