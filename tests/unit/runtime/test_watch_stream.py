"""A watch stream cut into chunks anywhere (inside an event, between two, many events in
one chunk) yields every event once, in order; a stream that ends inside an event is a
``TruncatedWatch`` carrying what came."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime import errors
from runtime.watch import Watch


class Chunks:
    """Stands in for a urllib3 response: ``stream`` hands out the given chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, _amt: int, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks

    def shutdown(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def events(n: int) -> list[dict[str, Any]]:
    return [{"type": "MODIFIED", "object": {"metadata": {"name": f"p{i}",
                                                       "resourceVersion": str(i)}}}
            for i in range(n)]


def cut(data: bytes, points: list[int]) -> list[bytes]:
    at = sorted({p % (len(data) + 1) for p in points})
    return [data[a:b] for a, b in zip([0, *at], [*at, len(data)], strict=True)]


@given(n=st.integers(0, 40), points=st.lists(st.integers(0, 10**6), max_size=30))
def test_every_event_comes_once_in_order_wherever_the_chunks_are_cut(
        n: int, points: list[int]) -> None:
    evs = events(n)
    data = b"".join(orjson.dumps(e) + b"\n" for e in evs)
    got = list(Watch(Chunks(cut(data, points))))  # type: ignore[arg-type]
    assert got == evs


def test_a_stream_that_ends_inside_an_event_is_truncated() -> None:
    data = orjson.dumps(events(2)[0]) + b"\n" + orjson.dumps(events(2)[1])[:20]
    w = Watch(Chunks([data[:7], data[7:]]))  # type: ignore[arg-type]
    it = iter(w)
    assert next(it)["object"]["metadata"]["name"] == "p0"
    with pytest.raises(errors.ApiError) as ei:
        next(it)
    assert ei.value.reason == "TruncatedWatch" and "MODIFIED" in ei.value.message
