"""A streaming watch: line-delimited JSON events, and what counts as a broken stream."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import orjson
import urllib3

from runtime import errors

JSON = dict[str, Any]


class Watch:
    """A streaming watch: iterate to get ``{"type": ..., "object": {...}}`` events.

    Iteration ends when the server closes the stream (normal timeout). ``close()`` may be
    called from another thread to stop it.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._resp = response
        self._closed = False

    def __iter__(self) -> Iterator[JSON]:
        buf = b""
        try:
            for chunk in self._resp.stream(65536, decode_content=True):
                if self._closed:
                    return
                if b"\n" not in chunk:
                    buf += chunk
                    continue
                # one split per chunk: a burst's chunk holds many events, each copied once
                lines = (buf + chunk).split(b"\n")
                buf = lines.pop()
                for line in lines:
                    if line.strip():
                        yield _watch_event(line)
            if buf.strip() and not self._closed:
                # The stream ended inside an event: a proxy or the server cut it short.
                raise errors.ApiError(
                    0, "TruncatedWatch", f"watch stream ended mid-event; received {buf[:200]!r}"
                )
        except (urllib3.exceptions.HTTPError, OSError) as e:
            if self._closed:
                return
            raise errors.ApiError(0, "TransportError", f"watch stream broken: {e}") from e
        finally:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._resp.shutdown()
        with contextlib.suppress(Exception):
            self._resp.release_conn()


def _watch_event(line: bytes) -> JSON:
    try:
        ev = orjson.loads(line)
    except orjson.JSONDecodeError as e:
        raise errors.ApiError(
            0, "BadWatchData", f"watch stream sent a line that is not JSON: {line[:200]!r}"
        ) from e
    if not isinstance(ev, dict):
        raise errors.ApiError(0, "BadWatchData", f"watch event is not an object: {line[:200]!r}")
    return ev
