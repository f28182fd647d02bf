"""random: a node chosen uniformly among the feasible ones, with the injected RNG
(seeded: same inputs, same choice). Rejection sampling over the index's nodes with
enough free GPUs, so only a few nodes are filtered; after many misses the rest of
them are tried in a shuffled order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from internal.scheduling.strategies.base import Strategy, register

if TYPE_CHECKING:
    from internal.scheduling.framework import Context, View
    from internal.scheduling.snapshot import Snapshot

MAX_TRIES = 64


@register
class RandomChoice(Strategy):
    name = "random"
    limit = 1

    def candidates(self, ctx: Context, view: View, snapshot: Snapshot) -> Iterator[str]:
        parts: list[list[str]] = [view.extra_nodes, *view.ledger.index.buckets(ctx.gpus)]
        total = sum(len(p) for p in parts)
        if total == 0:
            return

        def at(i: int) -> str:
            for p in parts:
                if i < len(p):
                    return p[i]
                i -= len(p)
            raise IndexError(i)  # pragma: no cover

        seen_pos: set[int] = set()
        seen: set[str] = set()
        for _ in range(min(MAX_TRIES, total * 2)):
            i = ctx.rng.randrange(total)
            if i in seen_pos:
                continue
            seen_pos.add(i)
            name = at(i)
            if name not in seen:
                seen.add(name)
                yield name
        rest = [i for i in range(total) if i not in seen_pos]
        ctx.rng.shuffle(rest)
        for i in rest:
            name = at(i)
            if name not in seen:
                seen.add(name)
                yield name
