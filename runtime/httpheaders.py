"""A response's header block parsed without the ``email`` package.

``http.client`` (under urllib3) parses every response's headers with
``email.parser``'s FeedParser: about 27 µs of the client's 250-330 µs of CPU per
request (``bench/profile.md``), for the seven plain ``Name: value`` lines the API
server sends. :func:`parse_headers` builds the very same ``HTTPMessage`` (the same
headers in the same order, the same payload and defects) from plain lines directly,
and hands anything else (a folded line, a line without a name, a bare CR, a
``multipart/`` or ``message/`` content type, a block cut short) to the original, so
what a reader of the message sees never changes.

Only our client's responses use it: ``POOL_CLASSES`` are urllib3 pools whose
connections answer with :class:`Response`, an ``http.client.HTTPResponse`` whose
``begin`` is the standard library's own code run with ``parse_headers`` bound to
this one. ``http.client.parse_headers`` itself is never replaced, so no other client
of the process (the ``kubernetes`` package, urllib) sees a different parser.
"""

from __future__ import annotations

import email.parser
import http.client
import re
import types
from typing import Any, BinaryIO

import urllib3
import urllib3.connection

#: http.client's own parser (the email package), for what is not plain lines
email_parse_headers = http.client.parse_headers
#: a header line FeedParser takes as ``name: value`` as it stands: a name of the
#: characters it allows (printable, no colon, no space), the colon, the value after
#: its leading blanks, no CR or LF inside
_LINE = r"([\x21-\x39\x3b-\x7e]+):[ \t]*([^\r\n]*)(?:\r\n|\n)"
_PLAIN_BLOCK = re.compile(f"(?:{_LINE})*")
_PLAIN_LINE = re.compile(_LINE)


def parse_headers(fp: BinaryIO, _class: Any = http.client.HTTPMessage) -> Any:
    """``http.client.parse_headers``, the same message, faster for plain lines."""
    lines = http.client._read_headers(fp)  # its limits (line length, count) kept
    return from_lines(lines, _class)


def from_lines(lines: list[bytes], _class: Any = http.client.HTTPMessage) -> Any:
    """The message of a header block read by ``http.client._read_headers`` (its
    lines, the blank one that ends it included)."""
    if not lines or lines[-1] not in (b"\r\n", b"\n"):
        return _slow(lines, _class)
    block = b"".join(lines[:-1]).decode("iso-8859-1")
    if _PLAIN_BLOCK.fullmatch(block) is None:
        return _slow(lines, _class)
    msg = _class()
    ctype = None
    for name, value in _PLAIN_LINE.findall(block):
        msg.set_raw(name, value)
        if ctype is None and name.lower() == "content-type":
            ctype = value
    if ctype is not None and ctype.lower().lstrip().startswith(("multipart/", "message/")):
        return _slow(lines, _class)  # FeedParser would read a body into parts
    msg.set_payload("")
    return msg


def _slow(lines: list[bytes], _class: Any) -> Any:
    hstring = b"".join(lines).decode("iso-8859-1")
    return email.parser.Parser(_class=_class).parsestr(hstring)


def _begin_with(parse: Any) -> Any:
    """``HTTPResponse.begin``'s own code, reading the header block with ``parse``
    (its one global of that name) instead of ``http.client``'s."""
    std = http.client.HTTPResponse.begin
    scope = {**vars(http.client), "parse_headers": parse}
    return types.FunctionType(std.__code__, scope, std.__name__, std.__defaults__,
                              std.__closure__)


class Response(http.client.HTTPResponse):
    """A response whose headers are read by :func:`parse_headers`."""

    begin = _begin_with(parse_headers)


class _Connection(urllib3.connection.HTTPConnection):
    response_class = Response


class _TLSConnection(urllib3.connection.HTTPSConnection):
    response_class = Response


class _Pool(urllib3.HTTPConnectionPool):
    ConnectionCls = _Connection


class _TLSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _TLSConnection


#: a ``PoolManager``'s ``pool_classes_by_scheme`` for our client
POOL_CLASSES: dict[str, type[urllib3.HTTPConnectionPool]] = {"http": _Pool, "https": _TLSPool}
