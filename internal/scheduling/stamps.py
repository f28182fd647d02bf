"""When each node's scheduling inputs last changed: what a decision made outside the
placement cache's lock is checked against when it is booked.

A scheduling pass reads the snapshot and the ledger without the lock (a seqlock's
reader): it takes a ``Mark`` first, and the locked ``assume`` refuses its decision
(``StaleDecision``) when a node it touches changed after the mark, or, for a
decision that books nothing or is held to a queue's quota, when anything did. Every
change of a node's inputs stamps it: its devices, holders and counts (the ledger's
``_apply``/``_release``, a booking's commit and nomination), its Node and GPUNode
(``Snapshot`` through the ledger's ``set_node_devices``/``remove_node``) and its
pods' requests (``NodeUsage``). A stamp is the running count of changes, so "changed
after the mark" is one comparison, and nothing grows but one int per node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class StaleDecision(Exception):
    """The decision was made on inputs that changed before it could be booked."""


@dataclass(frozen=True, slots=True)
class Mark:
    """Where the changes stood when a pass began: ``of`` is the ``Stamps`` read
    (a rebuild makes new ones, so a mark of the old ones is stale everywhere)."""

    of: Stamps
    changes: int
    holds: int


class Stamps:
    """The count of changes, and per node the count when it last changed."""

    __slots__ = ("_node", "changes", "holds")

    def __init__(self) -> None:
        #: every change of any node's inputs
        self.changes = 0
        #: the changes of holders and bookings alone (what a queue's usage sums)
        self.holds = 0
        self._node: dict[str, int] = {}

    def touch(self, node: str) -> None:
        """``node``'s inputs changed (its devices, labels, taints, or requests)."""
        self.changes += 1
        self._node[node] = self.changes

    def held(self, nodes: Iterable[str]) -> None:
        """What ``nodes`` hold changed (a booking or a holder came or went)."""
        self.holds += 1
        for node in nodes:
            self.touch(node)
        self.changes += 1  # a change that touches no node (a booking of none) counts

    def forget(self, node: str) -> None:
        """``node`` is gone: a pass that read it is stale (``changed``), and its
        stamp goes so that nodes coming and going leave nothing behind."""
        self.changes += 1
        self._node.pop(node, None)

    def mark(self) -> Mark:
        return Mark(self, self.changes, self.holds)

    def changed_since(self, mark: Mark) -> bool:
        """Did anything change after ``mark`` (or is it of other stamps)?"""
        return mark.of is not self or self.changes != mark.changes

    def changed(self, mark: Mark, nodes: Iterable[str]) -> list[str]:
        """The ``nodes`` whose inputs changed after ``mark`` (all of them when the
        mark is of other stamps)."""
        if mark.of is not self:
            return list(nodes)
        return [n for n in nodes if self._node.get(n, mark.changes + 1) > mark.changes]
