"""Nodes bucketed by free GPU count, so a decision looks at the nodes with enough
free GPUs first instead of scanning every node."""

from __future__ import annotations

import bisect
from collections.abc import Iterator


class FreeIndex:
    """Buckets of node names by free GPU count; each bucket kept sorted by name."""

    def __init__(self) -> None:
        self._free: dict[str, int] = {}
        self._buckets: dict[int, list[str]] = {}

    def set(self, node: str, free: int) -> None:
        old = self._free.get(node)
        if old == free:
            return
        if old is not None:
            self._discard(node, old)
        self._free[node] = free
        bucket = self._buckets.setdefault(free, [])
        bisect.insort(bucket, node)

    def _discard(self, node: str, free: int) -> None:
        bucket = self._buckets[free]
        i = bisect.bisect_left(bucket, node)
        del bucket[i]
        if not bucket:
            del self._buckets[free]

    def remove(self, node: str) -> None:
        old = self._free.pop(node, None)
        if old is not None:
            self._discard(node, old)

    def get(self, node: str) -> int:
        return self._free.get(node, 0)

    def __contains__(self, node: str) -> bool:
        return node in self._free

    def __len__(self) -> int:
        return len(self._free)

    def counts(self) -> dict[int, int]:
        """free count -> number of nodes."""
        return {k: len(v) for k, v in self._buckets.items()}

    def iter_nodes(self, min_free: int, *, most_free_first: bool = True) -> Iterator[str]:
        """Nodes with at least ``min_free`` free GPUs, bucket by bucket (name order
        within a bucket), from the most free (or the least free) bucket."""
        keys = sorted((k for k in self._buckets if k >= min_free), reverse=most_free_first)
        for k in keys:
            bucket = self._buckets.get(k)
            if bucket:
                # copy: callers may change the ledger while iterating a decision
                yield from tuple(bucket)

    def buckets(self, min_free: int) -> list[list[str]]:
        """The live bucket lists with at least ``min_free`` free, most free first.
        Read-only, and only while the ledger does not change."""
        return [self._buckets[k] for k in sorted(self._buckets, reverse=True) if k >= min_free]

    def count_below(self, min_free: int) -> int:
        return sum(len(v) for k, v in self._buckets.items() if k < min_free)
