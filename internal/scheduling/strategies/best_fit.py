"""bestFit: the node that is left with the fewest free GPUs after placing (bin
packing), keeping whole nodes free for large workloads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from internal.scheduling.strategies.base import Strategy, register

if TYPE_CHECKING:
    from internal.scheduling.framework import Candidate, Context


@register
class BestFit(Strategy):
    name = "bestFit"
    most_free_first = False
    limit = 8

    def score(self, cand: Candidate, ctx: Context) -> tuple[float, ...]:
        return (-cand.free_after,)
