"""Response headers parsed without the ``email`` package give the very message
``http.client``'s own parser gives, for any header block (plain ones on the fast path,
the rest handed over); and the client, whose connections alone use it, reads the
headers an API server sends (a 429's ``Retry-After``, a body's length) through it."""

from __future__ import annotations

import http.client
import io
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime import Client, RestConfig, errors, httpheaders
from runtime.retry import NO_RETRY
from tests.http_replies import reply_json

#: what kube-apiserver sends with a JSON answer
API_SERVER = (b"Audit-Id: 5d1c1c0e-7a8b-4a52-9a7e-8f8f8f8f8f8f\r\n"
              b"Cache-Control: no-cache, private\r\n"
              b"Content-Type: application/json\r\n"
              b"X-Kubernetes-Pf-Flowschema-Uid: 1b2c3d4e-aaaa-bbbb-cccc-000000000000\r\n"
              b"X-Kubernetes-Pf-Prioritylevel-Uid: 2b2c3d4e-aaaa-bbbb-cccc-000000000000\r\n"
              b"Date: Wed, 25 Nov 2026 02:00:00 GMT\r\n"
              b"Content-Length: 1234\r\n\r\n")


def email_parse(block: bytes) -> Any:
    """What http.client's own parse_headers makes of ``block``."""
    return httpheaders.email_parse_headers(io.BytesIO(block))


def same(a: Any, b: Any) -> bool:
    pa, pb = a.get_payload(), b.get_payload()
    if isinstance(pa, list) and isinstance(pb, list):  # parts: messages themselves
        payloads = len(pa) == len(pb) and all(map(same, pa, pb))
    else:
        payloads = pa == pb
    return (a.items() == b.items() and payloads
            and [type(d) for d in a.defects] == [type(d) for d in b.defects]
            and a.get_unixfrom() == b.get_unixfrom() and type(a) is type(b)
            and a.get_content_type() == b.get_content_type())


def test_an_api_servers_headers_take_the_fast_path_and_give_the_same_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slow: list[Any] = []
    monkeypatch.setattr(httpheaders, "_slow", lambda *a: slow.append(a))
    msg = httpheaders.parse_headers(io.BytesIO(API_SERVER + b"{}"))
    assert slow == []
    assert vars(msg) == vars(email_parse(API_SERVER))
    assert msg["content-length"] == "1234" and msg.get_content_type() == "application/json"


# header lines built from the characters that matter to the parser: names, colons,
# blanks, CR and LF inside a line, folding, content types that make parts
pieces = st.sampled_from(["Name", "X-Y", "a", ":", " ", "\t", "value", "\r", "\n", "From ",
                          "Content-Type", "multipart/mixed; boundary=b", "message/rfc822",
                          "text/plain", "é", ";", "=", "\x7f", ""])
lines = st.lists(st.lists(pieces, max_size=6).map("".join), max_size=8)


@given(lines=lines, eol=st.sampled_from(["\r\n", "\n"]), end=st.sampled_from(["\r\n", "\n", ""]))
def test_any_header_block_gives_the_message_http_client_would(lines: list[str], eol: str,
                                                               end: str) -> None:
    block = "".join(line + eol for line in lines).encode("iso-8859-1") + end.encode()
    mine = httpheaders.parse_headers(io.BytesIO(block))
    assert same(mine, email_parse(block))


@pytest.mark.parametrize("block", [
    b"A: b\r\n  folded\r\n\r\n",                         # a continuation line
    b"A: b\rC: d\r\n\r\n",                               # a bare CR inside a line
    b"no colon here\r\nA: b\r\n\r\n",                    # not a header: the body starts
    b"Content-Type: multipart/mixed; boundary=x\r\n\r\n",  # parts
    b"Content-type:message/rfc822\r\n\r\n",            # a message inside
    b"A:\t b \r\nA: c\r\n\r\n",                        # blanks, a repeated name
    b"A: b\r\n",                                         # cut short, no blank line
])
def test_what_is_not_plain_is_parsed_as_http_client_parses_it(block: bytes) -> None:
    assert same(httpheaders.parse_headers(io.BytesIO(block)), email_parse(block))


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.endswith("/busy"):
            reply_json(self, {"kind": "Status", "code": 429, "reason": "TooManyRequests",
                              "message": "too many requests"}, 429, {"Retry-After": "7"})
        else:
            reply_json(self, {"kind": "Pod", "metadata": {"name": "p"}})

    def log_message(self, *_a: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    httpd.daemon_threads = True
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        t.join(5)


def test_the_client_reads_an_answer_and_a_429s_retry_after_through_it(
        api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[int] = []
    fast = httpheaders.from_lines
    monkeypatch.setattr(httpheaders, "from_lines",
                        lambda lines, cls: read.append(len(lines)) or fast(lines, cls))
    client = Client(RestConfig(host=api), qps=0, retry=NO_RETRY)
    assert client.request("GET", "/api/v1/namespaces/ns/pods/p")["metadata"]["name"] == "p"
    with pytest.raises(errors.TooManyRequests) as err:
        client.request("GET", "/api/v1/namespaces/ns/pods/busy")
    assert err.value.retry_after == 7
    assert len(read) == 2  # both answers' headers read by our parser


def test_no_other_client_of_the_process_gets_our_parser(api: str) -> None:
    """Only our client's connections use it: ``http.client`` keeps its own parser, so
    urllib, the ``kubernetes`` package or any library beside ours reads headers as
    the standard library does."""
    Client(RestConfig(host=api), qps=0, retry=NO_RETRY).request(
        "GET", "/api/v1/namespaces/ns/pods/p")
    assert http.client.parse_headers is httpheaders.email_parse_headers
    conn = http.client.HTTPConnection(api.removeprefix("http://"))
    conn.request("GET", "/api/v1/namespaces/ns/pods/p")
    assert type(conn.getresponse()) is http.client.HTTPResponse
    conn.close()
