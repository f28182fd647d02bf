"""costOptimized: the cheapest nodes first (label gpu.orchestrator.dev/cost: a
number, or cheap / standard / expensive; see snapshot.py), and among equally cheap
ones the fullest that still fits (bin packing keeps cheap capacity busy). Nodes
whose indexed free count is too small are skipped without running the filters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from internal.scheduling.strategies.base import Strategy, register

if TYPE_CHECKING:
    from internal.scheduling.framework import Candidate, Context, View
    from internal.scheduling.snapshot import Snapshot


@register
class CostOptimized(Strategy):
    name = "costOptimized"
    reads_devices = False  # the free count and the node only
    limit = 16

    def candidates(self, ctx: Context, view: View, snapshot: Snapshot) -> Iterator[str]:
        for _cost, names in snapshot.cost_levels():
            for name in names:
                if view.index_free(name) >= ctx.gpus:
                    yield name

    def score(self, cand: Candidate, ctx: Context) -> tuple[float, ...]:
        return (-cand.node.cost, -cand.free_after)
