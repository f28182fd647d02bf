"""The working state of one decision: the ledger as it sees it (``View``), the
workload being placed and its per-node reasons (``Context``), a feasible node
(``Candidate``)."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1.types import GPUWorkload
from internal.scheduling.ledger import Ledger
from internal.scheduling.nodefit import PodFit
from internal.scheduling.snapshot import NodeInfo, Snapshot


class View:
    """The ledger as one decision of ``owner`` sees it: plus what this decision has
    taken so far (the gang's earlier replicas), minus everything the ``released``
    owners hold (planned victims: their bookings and their pods)."""

    def __init__(self, ledger: Ledger, owner: str, released: Iterable[str] = ()) -> None:
        self.ledger = ledger
        self.owner = owner
        self.released = frozenset(released)
        #: the owners whose holdings this decision does not count as taken
        self.mine = self.released | {owner}
        self.taken: dict[str, set[int]] = {}
        self.taken_count: dict[str, int] = {}
        #: (node, device) -> the shares and MIG instances this decision took there
        self.taken_portions: dict[tuple[str, int], list[Any]] = {}
        self.last_node: str | None = None  # node of the latest take (gang order)
        #: node -> replicas this decision placed there (node fit counts their pods)
        self.replicas_on: dict[str, int] = {}
        # nodes where released owners hold something: their index entry is stale
        self.extra_nodes: list[str] = sorted(
            {n for a in ledger.allocations().values() if a.owner in self.released
             for n in a.nodes}
        ) if self.released else []

    def held_by_other(self, node: str, device: int) -> bool:
        """Is ``device`` held by an owner other than this decision's (and not released)?"""
        return any(o not in self.mine for o in self.ledger.device_owners(node, device))

    def free_devices(self, node: str) -> set[int]:
        """The usable devices of ``node`` neither held by another owner nor taken by
        this decision."""
        free = set(self.ledger.usable(node))
        free -= self.ledger.held_except(node, self.mine)
        free.difference_update(self.taken.get(node, ()))
        return free

    def counted_load(self, node: str) -> int:
        c = self.ledger.counted(node)
        if not c:  # the usual node: nothing held by count (no sum over nothing)
            return self.taken_count.get(node, 0)
        return sum(v for o, v in c.items() if o != self.owner and o not in self.released) + (
            self.taken_count.get(node, 0)
        )

    def free_count(self, node: str, free: set[int] | None = None) -> int:
        """GPUs of ``node`` this decision may take (``free``: its ``free_devices``,
        when the caller has them already)."""
        if free is None:
            free = self.free_devices(node)
        return max(0, len(free) - self.counted_load(node))

    def take(self, node: str, devices: Iterable[int], count: int = 0) -> None:
        self.taken.setdefault(node, set()).update(devices)
        self.took_replica(node)
        if count:
            self.taken_count[node] = self.taken_count.get(node, 0) + count

    def took_replica(self, node: str) -> None:
        """One more replica of this decision goes on ``node``."""
        self.last_node = node
        self.replicas_on[node] = self.replicas_on.get(node, 0) + 1

    def index_free(self, node: str) -> int:
        """The (possibly stale) free count of the ledger's index: a cheap bound."""
        if node in self.extra_nodes:
            return len(self.ledger.usable(node))
        return self.ledger.index.get(node)

    def index_candidates(self, min_free: int, *, most_free_first: bool = True) -> Iterator[str]:
        """Nodes released victims touch, then the index's nodes with >= min_free."""
        seen = set(self.extra_nodes)
        yield from self.extra_nodes
        for n in self.ledger.index.iter_nodes(min_free, most_free_first=most_free_first):
            if n not in seen:
                yield n


@dataclass
class Context:
    workload: GPUWorkload
    gpus: int
    counted: bool
    rng: random.Random
    tolerations: list[Mapping[str, Any]]
    snapshot: Snapshot
    view: View
    visited: int = 0
    reasons: dict[str, str] = field(default_factory=dict)
    #: the strategy spreads (most free first); a share goes on the emptiest device
    spread: bool = True
    #: node -> the share or MIG instance the latest filter chose there
    portions: dict[str, Any] = field(default_factory=dict)
    #: what one replica's pod asks of its node (the template's; with the device
    #: plugin, no nvidia.com/gpu: the GPU filters count those GPUs, as before)
    fit: PodFit = field(init=False)

    def __post_init__(self) -> None:
        fit = PodFit.of((self.workload.spec.template or {}).get("spec"))
        self.fit = fit.without_gpus() if self.counted else fit

    @property
    def key(self) -> str:
        return self.workload.key


@dataclass(frozen=True, slots=True)
class Candidate:
    node: NodeInfo
    devices: tuple[int, ...]
    free: int  # free GPUs on the node before this replica
    #: the devices the replica will take when they are not picked yet (``devices``
    #: empty: the search picks them on the chosen node only); None: ``devices`` says
    deferred: int | None = None

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def free_after(self) -> int:
        taking = len(self.devices) if self.deferred is None else self.deferred
        return self.free - max(taking, 0)
