"""The placement state's door: every name of it that code outside
``controllers/placement/`` may use, by the client that uses it, and the read-only
view the seed path plans on (``PlacementView``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from api.v1alpha1.types import GPUWorkload
from controllers.placement.cache import LEDGER_READS
from internal.scheduling.framework import Decision
from internal.scheduling.snapshot import NodeInfo

if TYPE_CHECKING:
    from controllers.placement.state import PlacementState

#: The door: every name of the placement state that code outside
#: ``controllers/placement/`` may use, by the client that uses it
#: (``tests/unit/controllers/placement/test_one_door.py`` fails on any other). A name added
#: here widens the door: say in the commit why the caller cannot do without it.
DOOR: dict[str, frozenset[str]] = {
    # the GPUWorkload reconciler: decide, then commit or let go; the victim's side
    "reconciler": frozenset({
        "standing_of", "decide", "commit", "forget", "adopt", "booking", "children_wait",
        "nomination_done", "block", "evicted", "depart", "departed", "departing",
        "higher_priority_fresh", "node_records", "hold_created", "view", "default_exposure",
        "rng", "own_writes", "queues", "pod_books"}),
    # the seed path (controllers/podbinding): plans on a view, books in its book
    "seed path": frozenset({
        "seeds", "check_exact", "node_devices", "capacity_freed", "schedule", "queues",
        "queue_usage", "uuids"}),
    # the DRA claims (controllers/dra)
    "claims": frozenset({"release_claim_unless", "claim_gone", "claim_going",
                         "slice_results", "uuids"}),
    # the queues (controllers/queues): the gate in decide, their status
    "queues": frozenset({"queue_usage", "scheduler"}),
    # wiring and metrics (controllers/gpuworkload/setup.py, the evictor)
    "wiring": frozenset({"apply_event", "events", "invalidate", "refresh_stale", "rebuild",
                         "ready", "node_gpus", "device_shares", "device_use", "ledger_read",
                         "owned", "pending", "max_gpus_per_node", "share_floors",
                         "generation"}),
}


class PlacementView:
    """A read-only view of the state's nodes and holders, as a kube-scheduler plugin
    gets a snapshot: what the tests and a seed plan's last, locked try read
    (``PlacementState.seeds.book_seed``; its passes outside the lock read a
    ``seeds.PassView``). Every question takes the state's lock (re-entrant), and
    always asks the state's current ledger (a rebuild replaces it)."""

    READS = LEDGER_READS

    def __init__(self, state: PlacementState) -> None:
        self._state = state

    def node(self, name: str) -> NodeInfo | None:
        """What the snapshot knows of node ``name`` (None: no such node)."""
        return self._state.node_info(name)

    def schedule(self, w: GPUWorkload, then: Sequence[GPUWorkload] = ()) -> Decision:
        """Where ``w`` (and a gang's later parts ``then``) would go now (nothing is
        booked)."""
        return self._state.schedule(w, then)

    def check_exact(self, w: GPUWorkload, owner: str, node: str,
                    devices: tuple[int, ...]) -> str | None:
        """Why one replica of ``w`` under ``owner`` cannot have exactly ``devices`` of
        ``node`` (None: it can); see ``PlacementState.check_exact``."""
        return self._state.check_exact(w, owner, node, devices)

    def __getattr__(self, name: str) -> Any:
        if name not in self.READS:
            raise AttributeError(f"the placement view reads the ledger only; {name!r} "
                                 "is not one of its questions")
        return self._ask(name)

    def _ask(self, question: str) -> Any:
        """The ledger's read ``question`` (one of ``READS``), under the state's lock."""
        return self._state.ledger_read(question)
