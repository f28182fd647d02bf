"""leastLoaded: the node whose GPUs the agent reports least busy (mean utilization
over the node's devices, in whole percent), then the node with the most free GPUs
left, spreading load. Nodes without a GPUNode report count as idle (0%), so without
agents this is "the most free GPUs"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from internal.scheduling.strategies.base import Strategy, register

if TYPE_CHECKING:
    from internal.scheduling.framework import Candidate, Context


@register
class LeastLoaded(Strategy):
    name = "leastLoaded"
    reads_devices = False  # the free count and the node only
    most_free_first = True

    def score(self, cand: Candidate, ctx: Context) -> tuple[float, ...]:
        return (-round(cand.node.mean_utilization), cand.free_after)

    def ceiling(self, free: int, ctx: Context) -> tuple[float, ...]:
        # utilization is 0 to 100 (the GPUNode's schema): -round(mean) is at most 0;
        # a replica takes its GPUs off ``free`` (counted ones: the device plugin's,
        # ``free_after`` does not take them)
        return (0, free - (0 if ctx.counted else ctx.gpus))
