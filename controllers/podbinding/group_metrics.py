"""The pod groups among the live pods of the pod binding's scheduler, and the state
of each: what ``kubectl gpu groups`` shows (internal/cli/cmd_groups.py) and what
``gpu_orchestrator_pod_groups`` counts (``internal/metrics/domain.py``'s
``POD_GROUPS``), read by the same code so the two never disagree.

==================  ==========================================================  =======
state               the group's live members                                    gauge
==================  ==========================================================  =======
Refused             a member's group cannot be read (an unreadable size), or    refused
                    its members disagree on the size
Placed              every member present and bound                              placed
Reserved            fewer bound than its size, the others' slots held by a      placed
                    bound leader (``gpu.orchestrator.dev/group-slots``: a
                    ``LeaderReady`` group whose workers are made once the
                    leader is Ready), so the whole group is placed
WaitingForMembers   fewer present than its size, no slots held for the others   waiting
Unschedulable       all present, none bound                                     waiting
Partial             all present, some bound (a moment, while they bind)         waiting
==================  ==========================================================  =======

Finished and terminating pods are no members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from controllers.podbinding.seedentry import bound_entry, read_slots
from internal.objects import JSON
from internal.scheduling.podgroups import GroupRefusal, OwnerLookup, PodGroup, pod_group
from runtime.store import Indexer

Recognise = Callable[[JSON], PodGroup | GroupRefusal | None]

#: the gauge's state of each group state (any other: waiting)
GAUGE = {"Placed": "placed", "Reserved": "placed", "Refused": "refused"}


@dataclass
class SeenGroup:
    """One group as its live members show it."""

    key: str
    source: str
    #: (member, its index in the group or None)
    members: list[tuple[JSON, int | None]] = field(default_factory=list)
    sizes: set[int] = field(default_factory=set)
    refused: str | None = None  # why it cannot be formed

    @property
    def pods(self) -> list[JSON]:
        return [p for p, _ in self.members]

    @property
    def size(self) -> int | None:
        return max(self.sizes) if self.sizes else None

    @property
    def bound(self) -> int:
        return sum(1 for p in self.pods if _on_node(p))

    @property
    def running(self) -> int:
        return sum(1 for p in self.pods if (p.get("status") or {}).get("phase") == "Running")

    @property
    def reserved(self) -> int:
        """The slots a bound leader holds for members not bound yet (read as the
        controller books them again after a restart: ``seedentry.read_slots``)."""
        slots: set[int | None] = set()
        for p in self.pods:
            entry = bound_entry(p) if _on_node(p) else None
            if entry is not None:
                slots |= {e.slot for e in read_slots(p, entry)}
        return len(slots - {i for p, i in self.members if _on_node(p)})

    @property
    def state(self) -> str:
        size = self.size
        if self.refused or len(self.sizes) > 1 or size is None:
            return "Refused"
        bound = self.bound
        if bound >= size:
            return "Placed"
        if bound and bound + self.reserved >= size:
            return "Reserved"
        if len(self.members) < size:
            return "WaitingForMembers"
        return "Partial" if bound else "Unschedulable"


def _on_node(pod: JSON) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def live_groups(pods: Iterable[JSON], scheduler: str, recognise: Recognise) -> list[SeenGroup]:
    """The groups among ``pods`` of ``scheduler`` (sorted by key); a member whose
    group cannot be read and has no key is a group of its own (``?<ns>/<pod>``)."""
    found: dict[str, SeenGroup] = {}
    for p in pods:
        meta, spec = p.get("metadata") or {}, p.get("spec") or {}
        if spec.get("schedulerName") != scheduler or meta.get("deletionTimestamp") or \
                (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        g = recognise(p)
        if g is None:
            continue
        key = g.key if isinstance(g, PodGroup) else (
            g.key or f"?{meta.get('namespace')}/{meta.get('name')}")
        row = found.setdefault(key, SeenGroup(key, g.source))
        if isinstance(g, GroupRefusal):
            row.members.append((p, None))
            row.refused = g.message
        else:
            row.members.append((p, g.index))
            row.sizes.add(g.size)
    return sorted(found.values(), key=lambda r: r.key)


def group_states(pods: Iterable[JSON], scheduler: str, recognise: Recognise) -> dict[str, int]:
    """The gauge's state -> how many groups are in it, among ``pods``."""
    counts = {"placed": 0, "waiting": 0, "refused": 0}
    for g in live_groups(pods, scheduler, recognise):
        counts[GAUGE.get(g.state, "waiting")] += 1
    return counts


class GroupCounts:
    """``group_states`` of the pods cache, the gauge's source."""

    def __init__(self, pods: Indexer, scheduler: str, owners: OwnerLookup) -> None:
        self.pods, self.scheduler, self.owners = pods, scheduler, owners

    def __call__(self) -> dict[str, int]:
        return group_states(self.pods.list(), self.scheduler, self._recognise)

    def _recognise(self, pod: JSON) -> PodGroup | GroupRefusal | None:
        return pod_group(pod, self.owners)
