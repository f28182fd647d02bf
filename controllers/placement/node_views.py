"""What the scheduler sees of each node's GPUs: the node's GPUNode judged for
staleness, merged with the DRA driver's ResourceSlices where DRA is on.

Guarantees:

- A GPUNode whose agent's heartbeat is older than ``stale_after`` offers nothing
  (every device unhealthy; ``inventory.stale_view``); the placements on it stay in
  the ledger. ``views`` re-judges every GPUNode against the clock.
- With DRA on, a node's device list is the driver's (``SliceInventory.view``),
  with the agent's health where its GPUNode reports the same index; a node that
  only slices describe has a view too (``resourceslices.with_slices``).
- ``flipped`` re-judges every GPUNode against the clock and returns the views of
  those whose verdict changed since they were last judged: the periodic check
  rebuilds nothing for the nodes whose agents keep reporting.
- ``view(name)`` is None when neither a GPUNode nor a slice describes ``name``:
  the snapshot then removes its GPUNode view.

Not thread-safe: the placement state's lock guards every call.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from internal.objects import JSON
from internal.scheduling.inventory import is_stale, stale_view
from internal.scheduling.resourceslices import SliceInventory, with_slices
from runtime.store import thaw


class NodeViews:
    """The GPUNodes seen last (by name) and the driver's slices, as snapshot views."""

    def __init__(self, stale_after: float, clock: Callable[[], datetime],
                 slices: SliceInventory | None) -> None:
        self.stale_after = stale_after
        self.clock = clock
        #: ResourceSlices of the DRA driver (None: DRA off); see resourceslices.py
        self.slices = slices
        self._gpunodes: dict[str, JSON] = {}
        #: name -> the verdict its view was last built with (True: stale)
        self._verdicts: dict[str, bool] = {}

    def reset(self, gpunodes: list[JSON]) -> list[JSON]:
        """Takes ``gpunodes`` as the whole set (a rebuild); returns the views of
        every node, slice-only nodes last, by name."""
        self._gpunodes = {str(g["metadata"]["name"]): g for g in gpunodes}
        self._verdicts = {}
        judged = [self._judged(g) for g in gpunodes]
        return with_slices(judged, self.slices) if self.slices is not None else judged

    def set_gpunode(self, gpunode: JSON) -> JSON:
        """Records ``gpunode``; returns its view."""
        self._gpunodes[str((gpunode.get("metadata") or {}).get("name"))] = gpunode
        return self._view(gpunode)

    def drop_gpunode(self, name: str, uid: str = "") -> bool:
        """Forgets ``name``'s GPUNode, unless the one recorded is another object of
        that name (``uid`` given and different: a late delete). True if dropped."""
        have = self._gpunodes.get(name)
        have_uid = str(((have or {}).get("metadata") or {}).get("uid") or "")
        if have is None or (uid and have_uid and have_uid != uid):
            return False
        del self._gpunodes[name]
        self._verdicts.pop(name, None)
        return True

    def view(self, name: str) -> JSON | None:
        """``name``'s view from its GPUNode and its slices; None: neither is there."""
        g = self._gpunodes.get(name)
        if g is not None:
            return self._view(g)
        return self.slices.view(name, None) if self.slices is not None else None

    def views(self) -> list[JSON]:
        """Every GPUNode's view, re-judged against the clock now."""
        return [self._view(g) for g in self._gpunodes.values()]

    def flipped(self) -> list[JSON]:
        """The views of the GPUNodes whose heartbeat went stale, or fresh again,
        since their view was last built (re-judged against the clock now)."""
        now = self.clock()
        return [self._view(g) for name, g in self._gpunodes.items()
                if is_stale(g, now, self.stale_after) != self._verdicts.get(name)]

    def _view(self, gpunode: JSON) -> JSON:
        view = self._judged(gpunode)
        if self.slices is not None:
            name = str((gpunode.get("metadata") or {}).get("name"))
            return self.slices.view(name, view) or view
        return view

    def _judged(self, gpunode: JSON) -> JSON:
        """Nothing offered once the agent's heartbeat is stale."""
        stale = is_stale(gpunode, self.clock(), self.stale_after)
        self._verdicts[str((gpunode.get("metadata") or {}).get("name"))] = stale
        return stale_view(thaw(gpunode)) if stale else gpunode
