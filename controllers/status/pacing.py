"""When the status writer sends a status: a short hold that folds a workload's
passing states into one write, and a bounded rate while placements are being made.

kube-scheduler reports a placement with the Binding it makes anyway; our status is a
custom-resource write of its own per state, and each costs the API server more than
the pod it reports (issue 26). Two rules keep those writes off the placement path
without a user noticing:

- **Passing states are held.** A status whose phase is ``Scheduled`` because the
  workload was placed (``passing``: not a wait for a preemption's victims or for
  devices, which says why the workload does not start) is sent ``lag`` seconds
  after its first submit, not before; a newer status submitted
  meanwhile replaces it (the writer's latest-wins), so Scheduled then Running
  within the lag is one Running write. ``Pending`` is not held: it says why a
  workload waits or why its last attempt ended (``ClaimMismatch``, a failed child:
  the retry that follows within the lag would otherwise replace it, and the user
  would see ``retries: 1`` and never the reason). ``Running``, ``Succeeded`` and
  ``Failed`` are not held. Nor is the finalizer's patch (the fallback where
  admission did not add it: a finalizer held back would leave a just-placed
  workload deletable before its pods are gone): the writer sends it at once and
  holds the status it came with (``ready_at(..., finalizer=False)``).
- **A held state waits longer while placements are being made.** When its hold
  ends while ``busy()`` (the controller's work queue had an item queued or being
  processed within the last second, ``setup.PLACING_QUIET``: pods being created,
  bound, committed), a ``Scheduled`` status stays held until the placements pause,
  at most ``busy_hold`` more: in a burst the pods a workload made run seconds after
  their creation (the node agents are as busy as we are), later than ``lag``, and
  each of those workloads would otherwise cost two writes. Looked at again every
  ``BUSY_RECHECK`` seconds, so it goes within that of the placements pausing.
- **Writes yield to placements.** While ``busy()``,
  the writer sends at most ``busy_qps`` statuses per second (a token bucket, burst
  one); idle, it sends as fast as its client allows and so drains what waited.
  A status waits for a token at most ``max_lag`` after it was ready to go (its
  first submit, or the end of its hold): under a load that never pauses, the lag
  stays bounded, by ``max_lag`` (``lag + max_lag`` for a held one). Statuses go
  in the order they became ready.
- **Draining ignores both** (``drain``): the writer's ``stop`` sends everything.

The lag a user sees is the time from a status's first submit to its write,
``gpu_orchestrator_status_write_lag_seconds``; with these rules it is at most
``lag + max_lag`` plus the writer's queue over its client's QPS.

Pure: the clock and ``busy`` are given, so tests drive it with a fake clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controllers.status.conditions import SCHEDULED

#: the phase a workload passes through on its way to Running: held for ``lag``
#: (not Pending: it carries the reason a user waits for, see above)
HELD_PHASES = frozenset({"Scheduled"})
#: seconds between two looks at ``busy()`` for a status held on while busy
BUSY_RECHECK = 0.25


def passing(status: dict[str, Any]) -> bool:
    """A state a workload passes through: ``Scheduled`` because it was placed and its
    children are being made. Not one that says why it waits (its ``Scheduled``
    condition's reason ``WaitingForPreemption`` or ``WaitingForDevices``: a victim's
    pods take their grace period to go, and a held wait would be folded into the
    ``Running`` that follows, the user never told why the workload did not start)."""
    if status.get("phase") not in HELD_PHASES:
        return False
    return any(c.get("type") == SCHEDULED and c.get("reason") == SCHEDULED
               for c in status.get("conditions") or ())


@dataclass(frozen=True)
class PacingOptions:
    #: seconds a Scheduled status waits for a newer one (the manager's
    #: --status-lag); 0: sent at once
    lag: float = 2.0
    #: statuses per second while placements are being made (--status-busy-qps);
    #: 0 (the default): no bound. Measured in the benchmark at 20/s it raised the
    #: status lag (mean 5.6 s to 23 s in a QPS 500 burst) and saved no write
    #: (bench/README.md, Throughput II)
    busy_qps: float = 0.0
    #: a status ready this long is sent whether placements are being made or not
    #: (--status-max-lag)
    max_lag: float = 5.0
    #: while placements are being made, a held status waits for them to pause this
    #: much longer than ``lag`` at most (--status-busy-hold); 0: not at all
    busy_hold: float = 5.0


class Pacer:
    """Says when a status may be sent. Thread-safe (its own lock)."""

    def __init__(self, options: PacingOptions | None = None,
                 busy: Callable[[], bool] = lambda: False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options or PacingOptions()
        self.busy = busy
        self.clock = clock
        self._lock = threading.Lock()
        self._tokens = 1.0
        self._last = clock()
        self._draining = False

    def drain(self, on: bool = True) -> None:
        """From now on (until ``drain(False)``) every status is sent at once."""
        with self._lock:
            self._draining = on

    def ready_at(self, status: dict[str, Any], since: float, finalizer: bool,
                 now: float | None = None) -> float:
        """The earliest time a status first submitted at ``since`` may be sent
        (``finalizer``: it carries the finalizer's first patch), as judged at
        ``now``: a held status whose hold ended while busy says a moment later,
        until ``busy_hold`` is spent."""
        if self._draining or finalizer or not passing(status):
            return since
        held = since + self.options.lag
        now = self.clock() if now is None else now
        if now < held or self.options.busy_hold <= 0 or not self.busy():
            return held
        return min(held + self.options.busy_hold, now + BUSY_RECHECK)

    def admit(self, since: float, now: float) -> float:
        """0.0: send a status ready to go since ``since`` now (a token was taken,
        if one was needed). Otherwise the seconds until a token comes; nothing taken."""
        opts = self.options
        if opts.busy_qps <= 0 or self._draining or now - since >= opts.max_lag:
            return 0.0
        with self._lock:
            self._tokens = min(1.0, self._tokens + (now - self._last) * opts.busy_qps)
            self._last = now
            if not self.busy():
                return 0.0  # idle: the client's own limiter is the only bound
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return 0.0
            wait = (1.0 - self._tokens) / opts.busy_qps
        return min(wait, max(0.0, since + opts.max_lag - now)) or 1e-3
