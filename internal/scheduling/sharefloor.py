"""The smallest share this cluster places, and the least a share counts against its
queue (pure; docs/queues.md, "What counts", and docs/usage.md, "Sharing a GPU").

Two floors, the manager's flags:

| flag                              | a share below it                | also                       |
| --------------------------------- | ------------------------------- | -------------------------- |
| ``--min-share-memory`` (1Gi)      | ``gpuShare.memory``: not placed |                            |
| ``--min-share-fraction`` (0.05)   | ``gpuShare.fraction``: not      | the count floor, below     |
|                                   | placed                          |                            |

A workload refused for a floor waits, ``Scheduled=False`` with reason
:data:`SHARE_BELOW_MINIMUM` (its share cannot change: it is deleted and created
again), and spends no retry. The API server refuses below 1Mi whatever the flags
(the CRD: a share is booked in whole MiB).

The count floor: what one owner's shares hold *on one device* counts against its
queue as their parts of the device, and at least ``--min-share-fraction``
together (``counted``). A time-sliced share has no isolation: while it runs it has
the whole device's compute and may allocate all of its memory, and a device with a
share on it is closed to whole-GPU workloads. Counted by their parts alone, 12
shares of 0.001 spread on 12 devices would cost their queue 0.012 GPU. With the
floor each device a workload's shares touch costs at least 0.05, while replicas
packed on one device (``bestFit``) count their sum: a queue of nominal N holds
shares on at most N / 0.05 devices. MPS shares count the same (a memory share under
MPS limits memory, not compute). MIG instances have their own count (their slices).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from internal.scheduling.quantity import memory_mib
from internal.scheduling.shares import Portion, format_fraction, mib_text, parse_fraction

#: Scheduled=False reason (and Event) of a share below the cluster's floor
SHARE_BELOW_MINIMUM = "ShareBelowMinimum"
#: the defaults of ``--min-share-memory`` and ``--min-share-fraction``
DEFAULT_MIN_MEMORY = "1Gi"
DEFAULT_MIN_FRACTION = "0.05"


@dataclass(frozen=True, slots=True)
class ShareFloors:
    """The floors (0: none)."""

    memory_mib: int = 1024
    fraction: Fraction = Fraction(1, 20)

    @classmethod
    def parse(cls, memory: str, fraction: str) -> ShareFloors:
        """The flags' values (``1Gi``, ``0.05``; ``0`` for none). Raises ValueError."""
        mib = memory_mib(memory)
        if mib is None:
            raise ValueError(f"--min-share-memory {memory!r} is not a memory quantity "
                             "(e.g. 1Gi, 512Mi, 0)")
        part = Fraction(0) if re.fullmatch(r"0(\.0{1,3})?", str(fraction).strip()) else None
        if part is None:
            try:
                part = parse_fraction(fraction)
            except ValueError:
                raise ValueError(f"--min-share-fraction {fraction!r} is not 0 or a decimal "
                                 "in (0, 1] with at most 3 decimals") from None
        return cls(mib, part)

    def refusal(self, want: Portion) -> str | None:
        """Why a replica's share is below the floors (None: it is not)."""
        if want.memory_mib is not None and want.memory_mib < self.memory_mib:
            return (f"gpuShare memory {mib_text(want.memory_mib)} is below this cluster's "
                    f"smallest share, {mib_text(self.memory_mib)} (the manager's "
                    "--min-share-memory); delete the workload and create it with a larger "
                    "share")
        if want.fraction is not None and want.fraction < self.fraction:
            return (f"gpuShare fraction {format_fraction(want.fraction)} is below this "
                    f"cluster's smallest share, {format_fraction(self.fraction)} (the "
                    "manager's --min-share-fraction); delete the workload and create it "
                    "with a larger share")
        return None

    def counted(self, part: Fraction) -> Fraction:
        """GPUs that one owner's shares on one device (``part`` of it together) count."""
        return max(part, self.fraction) if part else part


#: the manager's defaults (also what a caller that names no floors gets)
DEFAULT_FLOORS = ShareFloors()
