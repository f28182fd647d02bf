"""bestFit: by memory, then by count. Where every feasible node's GPUs report their
memory (GPUNode), the node whose GPUs are the smallest that still fit
(minGPUMemoryMiB), keeping large-memory GPUs for workloads that need them; then,
as without reports, the node left with the fewest free GPUs after placing (bin
packing), keeping whole nodes free for large workloads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from internal.scheduling.strategies.base import Strategy, register

if TYPE_CHECKING:
    from internal.scheduling.framework import Candidate, Context


def gpu_memory(cand: Candidate) -> int | None:
    """MiB of the largest GPU the candidate would hand out: its chosen devices, or
    (device-plugin mode, no devices named) the node's usable ones; None if unknown."""
    return cand.node.max_memory_mib(cand.devices or None)


@register
class BestFit(Strategy):
    name = "bestFit"
    most_free_first = False
    limit = 16

    def score(self, cand: Candidate, ctx: Context) -> tuple[float, ...]:
        return (-cand.free_after,)

    def choose(self, feasible: list[Candidate], ctx: Context) -> Candidate:
        mems = [gpu_memory(c) for c in feasible]
        known = [m for m in mems if m is not None]
        if len(feasible) > 1 and len(known) == len(feasible):
            # smallest GPUs first; then fewest free left; ties to the earlier candidate
            best = min(range(len(feasible)),
                       key=lambda i: (known[i], feasible[i].free_after, i))
            return feasible[best]
        return super().choose(feasible, ctx)
