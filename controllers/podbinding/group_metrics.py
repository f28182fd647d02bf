"""What ``gpu_orchestrator_pod_groups`` reads: the pod groups among the live pods of
the pod binding's scheduler, by state (``internal/metrics/domain.py``'s
``POD_GROUPS``). A group is *placed* when each of its members is present and bound,
or bound to a slot its bound leader holds for it (a ``LeaderReady`` group's workers
not made yet: ``gpu.orchestrator.dev/group-slots``), *waiting* otherwise (members
missing, or present and not yet bound), *refused* when a member's group cannot be
read (sizes that disagree, an unreadable size)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from api.v1alpha1.keys import GROUP_SLOTS_ANNOTATION
from internal.objects import JSON
from internal.scheduling.podgroups import GroupRefusal, OwnerLookup, PodGroup, pod_group
from runtime.store import Indexer


def group_states(pods: Iterable[JSON], scheduler: str,
                 recognise: Callable[[JSON], PodGroup | GroupRefusal | None]
                 ) -> dict[str, int]:
    """state -> how many groups are in it, among ``pods`` (finished and terminating
    pods are no members)."""
    size: dict[str, int] = {}
    present: dict[str, int] = {}
    bound: dict[str, int] = {}
    refused: set[str] = set()
    for p in pods:
        meta, spec = p.get("metadata") or {}, p.get("spec") or {}
        if spec.get("schedulerName") != scheduler or meta.get("deletionTimestamp") or \
                (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        g = recognise(p)
        if g is None:
            continue
        if isinstance(g, GroupRefusal):
            refused.add(g.key or f"?{meta.get('namespace')}/{meta.get('name')}")
            continue
        if size.setdefault(g.key, g.size) != g.size:
            refused.add(g.key)  # its members disagree on its size
        present[g.key] = present.get(g.key, 0) + 1
        held = 1 + _slots(meta) if spec.get("nodeName") else 0
        bound[g.key] = bound.get(g.key, 0) + held
    placed = sum(1 for k in size if k not in refused and bound[k] >= size[k])
    return {"placed": placed, "waiting": len(set(size) - refused) - placed,
            "refused": len(refused)}


def _slots(meta: JSON) -> int:
    """How many workers' slots a bound leader's annotation holds (``1=n:2,3;2=n:0,1``)."""
    text = str((meta.get("annotations") or {}).get(GROUP_SLOTS_ANNOTATION) or "")
    return sum(1 for part in text.split(";") if "=" in part)


class GroupCounts:
    """``group_states`` of the pods cache, the gauge's source."""

    def __init__(self, pods: Indexer, scheduler: str, owners: OwnerLookup) -> None:
        self.pods, self.scheduler, self.owners = pods, scheduler, owners

    def __call__(self) -> dict[str, int]:
        return group_states(self.pods.list(), self.scheduler, self._recognise)

    def _recognise(self, pod: JSON) -> PodGroup | GroupRefusal | None:
        return pod_group(pod, self.owners)
