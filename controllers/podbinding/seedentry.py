"""What one seed-path pod holds in the shared ledger (``Entry``), read from a bound
pod (``read_bound``), and the ledger keys it is held under (``owner_key``); the book
of them is ``controllers.podbinding.seedbook``'s.

What a bound pod holds, after a restart too: its ``gpu.orchestrator.dev/devices``
annotation, else the map line of its index, else its ``nvidia.com/gpu`` request.
An annotation that cannot be read never makes a pod hold nothing. A pod group
member's Binding also writes its group's other slots beside its devices
(``gpu.orchestrator.dev/group-slots: "1=node-a:2,3;2=node-b:0,1"``, ``read_slots``):
the slots a leader placed before its workers exist holds for them, and the slots of
members gone while a restart dropped the manager's memory of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from api.v1alpha1.keys import (
    DEVICES_ANNOTATION,
    GROUP_SLOTS_ANNOTATION,
    SCHEDULING_MAP_ANNOTATION,
)
from api.v1alpha1.types import MAX_PRIORITY, Placement
from internal.objects import JSON, object_key
from internal.scheduling.mapparser import MapParseError, parse_scheduling_map
from internal.scheduling.podindex import pod_index
from internal.scheduling.pods import BadPod, parse_devices, pod_gpu_request, pod_uid


def pod_priority(pod: JSON) -> int:
    """A seed pod's priority in the ledger: its own ``spec.priority`` (set from its
    PriorityClass), never above what a GPUWorkload may have, so a higher-priority
    workload can preempt it like any other (and a tenant cannot make its pods
    unpreemptible)."""
    try:
        return max(0, min(int(pod_spec(pod).get("priority") or 0), MAX_PRIORITY))
    except (TypeError, ValueError):
        return 0




def pod_meta(pod: JSON) -> JSON:
    return pod.get("metadata") or {}


def pod_spec(pod: JSON) -> JSON:
    return pod.get("spec") or {}


def owner_key(pod: JSON) -> str:
    """The ledger key of a seed-path pod: its controlling owner, else itself."""
    meta = pod_meta(pod)
    ns = meta.get("namespace") or "default"
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return f"{ref.get('kind')}:{ns}/{ref.get('name')}"
    return f"Pod:{ns}/{meta.get('name') or ''}"


def is_seed_key(key: str) -> bool:
    """Is ``key`` a ledger key of this path (``Kind:ns/name``), not a GPUWorkload's
    (``ns/name``; a namespace never contains ':')?"""
    return ":" in key.partition("/")[0]


def is_group_key(ledger_key: str) -> bool:
    """Is ``ledger_key`` a pod group's booking (``PodGroup:<group key>``)?"""
    return ledger_key.startswith("PodGroup:")


def devs_text(devices: list[int] | tuple[int, ...]) -> str:
    return ",".join(map(str, devices))


@dataclass(slots=True)
class Entry:
    """What one pod holds: under ``ledger_key``, one placement."""

    ledger_key: str
    placement: Placement
    gpus: int  # counted GPUs when the placement names no devices
    #: the pod is bound, so its part of the owner's booking is committed (assumed
    #: until then). Whether a Binding of ours is on its way while the cache shows
    #: the pod unbound is ``OwnWrites``' to say, not this booking's
    committed: bool = False
    priority: int = 0
    uid: str = ""  # the pod's: a pod created again under its name is another one
    #: a pod group member's index in its group (the slot a replacement takes back),
    #: and its owner's revision of the group (``PodGroup.generation``)
    slot: int | None = None
    generation: str = ""
    #: taken back from a vacant slot: a failed bind leaves the slot vacant again
    retaken: bool = False
    #: a slot booked for a member not made yet (a leader-first group's worker):
    #: booked as a vacant slot, never as a pod
    reserved: bool = False
    #: what the pod's Binding writes as ``GROUP_SLOTS_ANNOTATION`` (its group's
    #: other slots, on a group member with an index), else ""
    slots_note: str = ""

    @property
    def counted(self) -> bool:
        return not self.placement.devices


def bound_entry(pod: JSON) -> Entry | None:
    """What a bound pod holds (``read_bound`` without its problems)."""
    return read_bound(pod)[0]


def read_bound(pod: JSON) -> tuple[Entry | None, list[str]]:
    """What a bound pod holds, as told by the pod, and what of it could not be read.

    The devices annotation, else its map line (when it names the node the pod is on),
    else its ``nvidia.com/gpu`` request, counted. None when it holds no GPU. A
    malformed devices annotation or map is a problem (a plain sentence for the
    user), never raised, and never makes the pod hold nothing: what can still be read
    is held, and a pod that says nothing readable holds its request, at least one GPU
    (what this scheduler gives a pod without a map), counted."""
    node = pod_spec(pod).get("nodeName")
    if not node:
        return None, []
    annotations = pod_meta(pod).get("annotations") or {}
    index, _ = pod_index(pod)
    problems: list[str] = []
    try:
        devices = parse_devices(annotations.get(DEVICES_ANNOTATION))
    except BadPod as exc:
        devices = None
        problems.append(str(exc))
    if devices is None and index is not None:
        text = annotations.get(SCHEDULING_MAP_ANNOTATION)
        if text is not None and text.strip():
            try:
                line = parse_scheduling_map(text).get(index)
            except MapParseError as exc:
                line = None
                problems.append(f"annotation {SCHEDULING_MAP_ANNOTATION}: {exc}")
            if line is not None and line.node == node:
                devices = list(line.devices)
    placement_index = index if index is not None else 0
    if devices:
        return Entry(owner_key(pod), Placement(index=placement_index, node=node,
                                               devices=devices), len(devices), True,
                     pod_priority(pod), pod_uid(pod)), problems
    gpus = pod_gpu_request(pod)
    if problems:
        gpus = max(gpus, 1)
    if gpus > 0:
        return Entry(f"Pod:{object_key(pod)}", Placement(index=placement_index, node=node), gpus,
                     True, pod_priority(pod), pod_uid(pod)), problems
    return None, problems


def slots_text(reserved: list[Entry]) -> str:
    """``GROUP_SLOTS_ANNOTATION``'s value for ``reserved`` slots."""
    return ";".join(f"{e.slot}={e.placement.node}:{devs_text(e.placement.devices)}"
                    for e in sorted(reserved, key=lambda e: e.slot or 0))


#: how many of its group's other slots a member's Binding names (the next ones by
#: index, wrapping round), besides a leader's reserved slots: a restart keeps the
#: slot of a member gone unless the RING members before it are all gone too, and a
#: group of thousands writes no annotation of thousands of slots on each member
RING = 8


def ring_note(slots: list[Entry], slot: int | None, also: list[Entry] | None = None) -> str:
    """``GROUP_SLOTS_ANNOTATION`` for the member of index ``slot`` of a group whose
    slots are ``slots``: the RING slots after its own by index (wrapping round), and
    ``also`` (a leader's reserved slots); "" for a member without an index."""
    if slot is None:
        return ""
    others = sorted({e.slot: e for e in slots
                     if e.slot is not None and e.slot != slot}.items())
    after = [e for i, e in others if i > slot] + [e for i, e in others if i < slot]
    named = {e.slot: e for e in [*after[:RING], *(also or [])] if e.slot != slot}
    return slots_text(list(named.values()))


def read_slots(pod: JSON, leader: Entry) -> list[Entry]:
    """The other slots of its group a bound member's ``GROUP_SLOTS_ANNOTATION``
    names (the members not made yet of a group placed at its leader, and every other
    member's), under ``leader``'s (the member's) key, as reserved slots. Read only
    beside the devices annotation (which a tenant cannot write: only a Binding of
    ours does); what cannot be read is no slot, nor is the member's own."""
    annotations = pod_meta(pod).get("annotations") or {}
    text = annotations.get(GROUP_SLOTS_ANNOTATION)
    if not text or leader.counted or DEVICES_ANNOTATION not in annotations:
        return []
    out = []
    for part in str(text).split(";"):
        index, _, where = part.partition("=")
        node, _, devs = where.partition(":")
        try:
            devices = parse_devices(devs)
            slot = int(index)
        except (BadPod, ValueError):
            continue
        if devices and node and slot >= 0 and slot != leader.slot:
            out.append(Entry(leader.ledger_key, Placement(index=slot, node=node,
                                                          devices=devices),
                             len(devices), True, leader.priority, slot=slot,
                             generation=leader.generation, reserved=True))
    return out


def without_unknown(pod: JSON, entry: Entry | None, known: frozenset[int] | None
                    ) -> tuple[Entry | None, list[str]]:
    """``entry`` less the devices its node does not have (``known``: every index of
    the node, None while unknown), so a pod annotated ``"99"`` on a 4-GPU node holds
    no phantom device 99: it holds what it names that exists, else one GPU, counted."""
    if entry is None or known is None or entry.counted:
        return entry, []
    devs = entry.placement.devices
    unknown = [d for d in devs if d not in known]
    if not unknown:
        return entry, []
    node = entry.placement.node
    problem = (f"annotation {DEVICES_ANNOTATION} names device(s) {devs_text(unknown)}, which "
               f"{node} does not have (it has {devs_text(sorted(known))})")
    kept = [d for d in devs if d in known]
    if kept:
        return replace(entry, placement=entry.placement.model_copy(
            update={"devices": kept}), gpus=len(kept)), [problem]
    return Entry(f"Pod:{object_key(pod)}", Placement(index=entry.placement.index, node=node),
                 1, entry.committed, entry.priority), [problem]
