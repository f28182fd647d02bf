"""roundRobin: the first feasible node after the one used last, in name order,
wrapping around. The cursor lives in the strategy instance: keep one instance per
scheduler. Nodes whose indexed free count is too small are skipped without running
the filters (a dictionary lookup each)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from internal.scheduling.strategies.base import Strategy, register

if TYPE_CHECKING:
    from internal.scheduling.framework import Context, View
    from internal.scheduling.snapshot import Snapshot


@register
class RoundRobin(Strategy):
    name = "roundRobin"
    limit = 1

    def __init__(self) -> None:
        self.cursor: str | None = None

    def candidates(self, ctx: Context, view: View, snapshot: Snapshot) -> Iterator[str]:
        # within a gang, continue after the node the previous replica went to
        start = view.last_node if view.last_node is not None else self.cursor
        for name in snapshot.names_after(start):
            if view.index_free(name) >= ctx.gpus:
                yield name

    def placed(self, nodes: list[str]) -> None:
        if nodes:
            self.cursor = nodes[-1]
