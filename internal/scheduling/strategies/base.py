"""Strategy base class and the registry of strategies by name.

A strategy decides two things for each replica: which nodes to look at, in which
order (``candidates``), and which of the feasible ones it gathered to take
(``score``, higher is better; ties go to the earlier candidate). The framework
runs the filters, gathers up to ``limit`` feasible nodes (fewer where the strategy
bounds its scores, ``ceiling``: none of the nodes left could win), and picks
devices: on each of them when the strategy ``reads_devices`` (or a topology
decides whether a node has a set at all), else on the chosen node only.

Adding a strategy: a new file in this package with a subclass decorated by
``@register``; nothing else changes (the package imports every module in it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from internal.scheduling.framework import Candidate, Context, View
    from internal.scheduling.snapshot import Snapshot

_REGISTRY: dict[str, type[Strategy]] = {}


class Strategy:
    name: ClassVar[str] = ""
    #: feasible nodes gathered before choosing among them (kube-scheduler's
    #: percentageOfNodesToScore idea); 1 means "the first feasible one"
    limit: ClassVar[int] = 32
    #: index traversal order: most free GPUs first (spread) or least first (pack)
    most_free_first: ClassVar[bool] = True
    #: may plan preemption of lower-priority workloads when nothing fits
    preempts: ClassVar[bool] = False
    #: placements come from the workload's map, not from a node search
    uses_map: ClassVar[bool] = False
    #: ``score``/``choose`` read a candidate's devices (not only how many it takes):
    #: the search then picks them on every feasible node, not on the chosen one only
    reads_devices: ClassVar[bool] = True

    def candidates(self, ctx: Context, view: View, snapshot: Snapshot) -> Iterable[str]:
        """Node names to try, best first. Default: the free-capacity index."""
        return view.index_candidates(ctx.gpus, most_free_first=self.most_free_first)

    def score(self, cand: Candidate, ctx: Context) -> tuple[float, ...]:
        return (0.0,)

    def ceiling(self, free: int, ctx: Context) -> tuple[float, ...] | None:
        """The highest score a candidate with at most ``free`` GPUs free for this
        decision can get; None (the default): no such bound, and the search gathers
        ``limit`` feasible nodes. With one, a one-replica search over the
        free-capacity index, most free first, stops as soon as the best candidate so
        far scores at least the next node's ceiling: the nodes after it could only
        tie, and ties go to the earlier candidate (``search.py``)."""
        return None

    def choose(self, feasible: list[Candidate], ctx: Context) -> Candidate:
        best = feasible[0]
        best_score = self.score(best, ctx)
        for c in feasible[1:]:
            s = self.score(c, ctx)
            if s > best_score:
                best, best_score = c, s
        return best

    def placed(self, nodes: list[str]) -> None:
        """Called after a successful decision with the nodes used, in replica order."""


def register(cls: type[Strategy]) -> type[Strategy]:
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"strategy {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def _load_all() -> None:
    import importlib
    import pkgutil

    import internal.scheduling.strategies as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name != "base":
            importlib.import_module(f"{pkg.__name__}.{mod.name}")


def names() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


def create(name: str) -> Strategy:
    """A fresh instance of the strategy registered as ``name`` (KeyError if none)."""
    _load_all()
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown scheduling strategy {name!r}; known: {names()}") from None
