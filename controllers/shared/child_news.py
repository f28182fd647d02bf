"""A child's event wakes its GPUWorkload only when it tells the workload's reconcile
something it reads (an event predicate on the controller's Pod and Job watches).

What a reconcile of the owner reads of a child (``owner_reads``; the reconciler,
``attempt.py``, ``child_api.py``, ``unmanaged.py``):

- its labels (the attempt, the replica index), our annotations (``gpu.orchestrator.dev/``:
  the devices, share, MIG instance, exposure, spec hash), its controller owner, its
  node and its deletion;
- its phase as ``child_phase`` reads it (a Job's from its conditions; a Job's pods
  wake the workload through their own watch), and a failed pod's reason and
  message (a kubelet's rejection ends the attempt with them).

An update that changes none of these, nor the spec, wakes nobody: another
component's annotation (the test environment's admitter marks each pod it
admits), a kubelet's status write that leaves the pod Pending (its conditions,
IPs, container states before they run), a Job's counts. Every such reconcile
found the workload as it was and wrote nothing (bench/README.md, round 11). Adds
and deletes always pass (adds of our own creates: ``OwnEchoes``). The placement
state and the evictor have their own handlers on the same informers and see
every event."""

from __future__ import annotations

from typing import Any

from api.v1alpha1.keys import GROUP
from controllers.status.conditions import child_phase
from internal.objects import JSON
from internal.scheduling.pods import controller_ref
from runtime.predicates import Predicate, UpdateEvent

#: the prefix of our annotations (the only ones a reconcile reads of a child)
OURS = f"{GROUP}/"


def owner_reads(child: JSON) -> tuple[Any, ...]:
    """What a reconcile of ``child``'s owner reads of it (the module's list): two
    versions of a child with equal ``owner_reads`` reconcile alike."""
    meta = child.get("metadata") or {}
    status = child.get("status") or {}
    annotations = meta.get("annotations") or {}
    phase = child_phase(child)
    return (meta.get("labels") or {},
            {k: v for k, v in annotations.items() if k.startswith(OURS)},
            (controller_ref(child) or {}).get("uid"),
            (child.get("spec") or {}).get("nodeName"),
            meta.get("deletionTimestamp"),
            phase,
            (status.get("reason"), status.get("message")) if phase == "Failed" else None)


class ChildNews(Predicate):
    """Passes a child's update only when its spec or ``owner_reads`` changed."""

    def update(self, e: UpdateEvent) -> bool:
        return e.old.get("spec") != e.new.get("spec") or \
            owner_reads(e.old) != owner_reads(e.new)
