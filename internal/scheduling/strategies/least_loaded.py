"""leastLoaded: the node with the most free GPUs (then the lowest mean utilization
reported by the agent), spreading load."""

from __future__ import annotations

from typing import TYPE_CHECKING

from internal.scheduling.strategies.base import Strategy, register

if TYPE_CHECKING:
    from internal.scheduling.framework import Candidate, Context


@register
class LeastLoaded(Strategy):
    name = "leastLoaded"
    most_free_first = True

    def score(self, cand: Candidate, ctx: Context) -> tuple[float, ...]:
        return (cand.free_after, -cand.node.mean_utilization)
