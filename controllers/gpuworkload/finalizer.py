"""Our finalizer ``gpu.orchestrator.dev/children`` on a GPUWorkload.

Put into the create by the MutatingAdmissionPolicy of ``config/admission-finalizer``
where the cluster serves one (api/v1alpha1/finalizer_policy.py), else added with the
first status that places the workload (``ensure``); on deletion the controller
asks every child to go itself (instead of waiting for the garbage collector) and
removes the finalizer once the cache shows none left, so ``kubectl delete gw x``
returns when its pods (and Jobs) are gone and whatever waits for their GPUs is
placed right after. With ``--cascade=orphan`` (the API server's ``orphan``
finalizer) the children stay, and keep their GPUs: pods and Jobs hold devices
whoever owns them. Nothing of ours is written once the object may go.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from api.v1alpha1.keys import CHILDREN_FINALIZER
from api.v1alpha1.types import API_VERSION
from controllers.gpuworkload.child_api import ChildAPI
from controllers.placement.state import PlacementState
from controllers.shared.own_writes import OwnWrites
from controllers.status.builder import add_finalizer_patch
from controllers.status.writer import StatusWriter
from internal.objects import JSON, object_key
from runtime import NotFound, Result

#: how often a deleting workload looks again for children still going away
FINALIZE_POLL = 1.0



class ChildrenFinalizer:
    def __init__(self, client: Any, children: ChildAPI, status_writer: StatusWriter | None,
                 release: Callable[[PlacementState, str], None], own_writes: OwnWrites,
                 children_gone: Callable[[PlacementState, JSON], None] = lambda state, raw: None,
                 ) -> None:
        self.client = client
        #: called once none of the children is left, before the object may go (not
        #: with ``--cascade=orphan``: the children run on, with what they use)
        self.children_gone = children_gone
        self.children = children
        self.status_writer = status_writer
        self._release = release  # the workload's booking goes (its pods keep theirs)
        self.own_writes = own_writes  # records our own write of the object

    def finalize(self, state: PlacementState, raw: JSON) -> Result | None:
        """Being deleted: release the booking (in ``state``, the reconcile's one
        state), ask every child to go, and let the object go once none is left."""
        key = object_key(raw)
        self._release(state, key)
        meta = raw["metadata"]
        finalizers = meta.get("finalizers") or ()
        if CHILDREN_FINALIZER not in finalizers:
            return None
        if "orphan" in finalizers:
            # ``--cascade=orphan``: the user keeps the children
            left = []
        else:
            self.children.delete(raw)
            left = self.children.left(meta["uid"])
        if left:
            return Result(requeue_after=FINALIZE_POLL)
        if "orphan" not in finalizers:
            self.children_gone(state, raw)
        if self.status_writer is not None:
            # nothing of ours may be written once the object can go: a write still
            # in flight after the wait keeps the finalizer for now
            if not self.status_writer.settle(key):
                return Result(requeue_after=FINALIZE_POLL)
            self.status_writer.forget(key)
        rest = [f for f in meta.get("finalizers") or () if f != CHILDREN_FINALIZER]
        with contextlib.suppress(NotFound):
            self.client.patch(API_VERSION, "GPUWorkload", meta["name"],
                              {"metadata": {"finalizers": rest or None,
                                            "resourceVersion": meta["resourceVersion"]}},
                              namespace=meta["namespace"], patch_type="merge")
        return None

    def ensure(self, raw: JSON) -> JSON:
        """Adds our finalizer (only to this version of the object, else Conflict);
        returns the object as written."""
        meta = raw["metadata"]
        if CHILDREN_FINALIZER in (meta.get("finalizers") or ()):
            return raw
        written = self.client.patch(
            API_VERSION, "GPUWorkload", meta["name"],
            add_finalizer_patch(meta, CHILDREN_FINALIZER),
            namespace=meta["namespace"], patch_type="merge")
        self.own_writes.wrote(written)
        return written
