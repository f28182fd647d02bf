"""What one scheduling attempt decided: the outcomes and the ``Decision``."""

from __future__ import annotations

from dataclasses import dataclass, field

from api.v1alpha1.types import GPUWorkload, Placement
from internal.scheduling.ledger import Ledger, booking_owner

# Decision outcomes (also used as condition reasons by the controller)
SCHEDULED = "Scheduled"
UNSCHEDULABLE = "Unschedulable"
INVALID_MAP = "InvalidSchedulingMap"
PREEMPT = "Preempting"

#: a preemption whose victims' disruption budgets let none of them go: the preemptor
#: waits (``Decision.wait_reason``), nominated over nobody, and spends no retry
PREEMPTION_REFUSED = "PreemptionRefused"


@dataclass
class Decision:
    """Outcome of one scheduling attempt.

    - ``outcome == SCHEDULED``: ``placements`` has one entry per replica.
    - ``UNSCHEDULABLE``: nothing fits; ``message`` groups per-node ``reasons``.
    - ``INVALID_MAP``: the user's map is wrong; ``message`` names the line/problem.
    - ``PREEMPT``: evict ``victims`` (workload keys, lowest priority first); the
      workload then fits as in ``placements``, booked as a nomination over the
      victims' owners (``overlap``): their pods must be gone before it starts.
    """

    outcome: str
    strategy: str
    placements: list[Placement] = field(default_factory=list)
    message: str = ""
    reasons: dict[str, str] = field(default_factory=dict)
    victims: list[str] = field(default_factory=list)
    overlap: list[str] = field(default_factory=list)  # the victims' owners
    counted: bool = False
    gpus_per_replica: int = 0
    visited: int = 0  # nodes the filters ran on
    queue: str | None = None  # the GPUQueue that admits it (None: in no queue)
    #: waiting, not failing (no retry spent): the Scheduled condition's reason (its
    #: queue's, ``ShareBelowMinimum``, ``PREEMPTION_REFUSED``)
    wait_reason: str = ""
    evict_message: str = ""  # what a PREEMPT tells its victims (default: by priority)
    #: set by the booking (``PlacementState.decide``) of a SCHEDULED decision, in its
    #: section: node -> pods its devices still wait for (None: not booked, or a PREEMPT)
    blocked: dict[str, list[str]] | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == SCHEDULED

    @property
    def nodes(self) -> list[str]:
        return sorted({p.node for p in self.placements})

    @property
    def gpus_total(self) -> int:
        """GPUs the placements use (for status.gpus): the sum over replicas."""
        if self.counted:
            return self.gpus_per_replica * len(self.placements)
        return sum(len(p.devices) for p in self.placements)

    def assume(self, ledger: Ledger, workload: GPUWorkload) -> None:
        """Book this decision in ``ledger`` (raises LedgerConflict if stale). A
        preemption is booked once its victims' bookings are released: nominated
        over their pods, which still hold the devices until they are gone."""
        if self.outcome not in (SCHEDULED, PREEMPT):
            raise ValueError(f"cannot assume a {self.outcome} decision")
        ledger.assume(
            workload.key,
            self.placements,
            gpus_per_replica=self.gpus_per_replica,
            priority=workload.spec.priority,
            owner=booking_owner(workload),
            uid=workload.metadata.uid or "",
            overlap=self.overlap,
        )
