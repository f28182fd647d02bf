"""Where a pod group goes (docs/podgroups.md, "How a group is placed"): its unbound
members (and the slots of members not made yet) planned as one GPUWorkload gang by
the shared scheduler, with its members' priority, so that the ``priority`` strategy
may name victims (``grouppreempt.py``). Pure: it reads a read-only
``PlacementView`` in a scheduling pass (``PlacementState.seeds.book_group``, which
books what it returns unless what it read changed meanwhile) and returns each
member's ``Entry``, or why the group cannot go anywhere, in the words of its
members' ``FailedScheduling`` Events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

import orjson

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL, SCHEDULING_MAP_ANNOTATION
from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement, SchedulingStrategy, Topology
from controllers.placement.seeds import GroupPlan, Preemption
from controllers.placement.state import PlacementView
from controllers.podbinding.grouppreempt import group_priority, refuses_preemption, was
from controllers.podbinding.leaderfirst import slot_key
from controllers.podbinding.memberclaims import dra_gpus, planned
from controllers.podbinding.seedbook import Entry, pod_meta, pod_priority, pod_spec
from controllers.podbinding.seedentry import ring_note
from controllers.podbinding.seedplan import FIT_FIELDS, MAX_GPUS_PER_POD, pod_model
from internal.objects import JSON, object_key
from internal.scheduling.authority import NAMED
from internal.scheduling.mapparser import (
    MapParseError,
    format_scheduling_map,
    parse_scheduling_map,
)
from internal.scheduling.outcome import UNSCHEDULABLE, Decision
from internal.scheduling.podgroups import PodGroup
from internal.scheduling.pods import pod_gpu_request, pod_uid

#: a group's own choice of strategy (else the pod binding's default)
STRATEGY_ANNOTATION = "gpu.orchestrator.dev/strategy"
#: a group's NVLink requirement for each member's devices (a GPUWorkload's topology)
TOPOLOGY_ANNOTATION = "gpu.orchestrator.dev/topology"

def group_ledger_key(group: PodGroup) -> str:
    return f"PodGroup:{group.key}"


def _order(members: Iterable[tuple[JSON, PodGroup]]) -> list[tuple[JSON, PodGroup]]:
    return sorted(members, key=lambda m: (m[1].index if m[1].index is not None else 1 << 30,
                                          object_key(m[0])))


def plan_group(view: PlacementView, group: PodGroup, unbound: list[tuple[JSON, PodGroup]],
               default_strategy: str, reserve: list[int] | None = None,
               schedule: Callable[[GPUWorkload, Sequence[GPUWorkload]], Decision] | None = None
               ) -> GroupPlan:
    """Where the unbound members go, and the members of indices ``reserve`` not made
    yet (``leaderfirst.py``: reserved slots, each as its owner's template makes it), as
    one gang, or why nowhere, and whom it preempts to fit (``grouppreempt.py``: the
    gang has its members' priority, and the ``priority`` strategy may name
    victims): read from ``view`` in the group's pass
    (``PlacementState.seeds.book_group``); ``schedule`` asks the scheduler (default
    ``view.schedule``, which may preempt in any namespace). A group always
    gets named devices: its members' ``CUDA_VISIBLE_DEVICES`` is a reference to the
    devices annotation the binding writes (internal/webhook/groupexposure.py), which
    a counted placement would leave empty, hiding every GPU. Members that request
    ``nvidia.com/gpu`` go only to named nodes (one authority per node: where the
    device plugin picks devices, ours could be others than its); members that
    request none, to any node that takes named devices."""
    members = _order(unbound)
    first = members[0][0]
    reserve = reserve or []
    text = (pod_meta(first).get("annotations") or {}).get(SCHEDULING_MAP_ANNOTATION)
    if text is not None:
        return _plan_by_map(group, members, reserve, str(text), schedule or view.schedule)
    # each slot's own pod: a member's, or the owner's template of one made later
    pods = slot_pods(group, [p for p, _ in members], reserve)
    requested = max(pod_gpu_request(p) for p in pods)
    if requested > MAX_GPUS_PER_POD:
        return None, (f"a member requests {requested} nvidia.com/gpu, more than the "
                      f"{MAX_GPUS_PER_POD} one pod may have"), None
    claimed = max(dra_gpus(p) or 0 for p in pods)
    if claimed > MAX_GPUS_PER_POD:
        return None, (f"a member's ResourceClaims ask {claimed} devices, more than the "
                      f"{MAX_GPUS_PER_POD} one pod may have"), None
    strategy = (pod_meta(first).get("annotations") or {}).get(STRATEGY_ANNOTATION) \
        or default_strategy
    if strategy == SchedulingStrategy.ANNOTATION_MAP.value:
        strategy = SchedulingStrategy.LEAST_LOADED.value
    raw = (pod_meta(first).get("annotations") or {}).get(TOPOLOGY_ANNOTATION)
    try:
        topology = Topology(raw or Topology.NONE.value)
    except ValueError:
        return None, (f"annotation {TOPOLOGY_ANNOTATION} is {raw!r}, not one of "
                      f"{', '.join(t.value for t in Topology)}"), None
    priority = group_priority(p for p, _ in members)
    parts, why = _parts(pods, strategy, topology, priority)
    if parts is None:
        return None, why, None
    decision = (schedule or view.schedule)(parts[0], parts[1:])
    where = (f"; members asking nvidia.com/gpu go only to nodes labelled "
             f"{DEVICE_AUTHORITY_LABEL}={NAMED}") if requested else ""
    preemption = Preemption.of(decision, group_ledger_key(group), priority)
    never = refuses_preemption(p for p, _ in members) if preemption else None
    if never is not None:
        return None, (f"{was(decision)}{where}; pod {never} says preemptionPolicy Never: "
                      f"the group preempts nobody"), None
    if preemption is not None and group_ledger_key(group) in preemption.victims:
        # its own key's older members (another generation, of lower priority): the
        # new gang would be booked over them, under the same key; it waits instead
        return None, (f"{was(decision)}{where}; the room is its own earlier members', "
                      f"under the same group key: waiting for them to go"), None
    if not decision.ok and preemption is None:
        if strategy == SchedulingStrategy.PRIORITY.value and decision.outcome == UNSCHEDULABLE:
            where += (f"; preempting every holder of lower priority than the group's "
                      f"{priority} would not make room either")
        return None, f"{decision.message}{where}", None
    entries = _entries(group, members, reserve, decision.placements)
    return entries, "", preemption


def slot_pods(group: PodGroup, members: list[JSON], reserve: list[int]) -> list[JSON]:
    """``members`` (the first of them first), then each member of index in
    ``reserve`` not made yet, as its owner's template will make it (under the first
    member's metadata; the first member itself where the group does not say); a
    ``dra`` one asking its templates' GPUs (``LaterPart.dra_gpus``)."""
    if not members:
        return []
    first = members[0]
    out = list(members)
    for part in (group.later_part(i) for i in reserve):
        pod = first if part is None else {"metadata": pod_meta(first), "spec": part.spec}
        out.append(pod if part is None or part.dra_gpus is None
                   else planned(pod, part.dra_gpus))
    return out


def _parts(pods: list[JSON], strategy: str, topology: Topology, priority: int
           ) -> tuple[list[GPUWorkload] | None, str]:
    """The gang of ``pods`` (in slot order) as GPUWorkload models, one per run of
    pods alike (their GPUs and what node fit and the filters read, ``FIT_FIELDS``),
    each of its run's replicas: one model when all are alike (``gangparts.py``
    otherwise). A model is made once per run, not per member. A ``dra`` member
    (``memberclaims.planned``) asks its claims' GPUs in ``dra`` mode: only nodes
    with ResourceSlices of the driver, as a GPUWorkload in that mode."""
    runs: list[tuple[GPUWorkload, int]] = []
    last: tuple[int, bool, bytes] | None = None
    for pod in pods:
        claimed = dra_gpus(pod)  # a dra member: its claims' count, on nodes with slices
        requested = pod_gpu_request(pod) if claimed is None else claimed
        alike = (requested, claimed is not None, _fit_key(pod_spec(pod)))
        if alike == last:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            continue
        last = alike
        only = {DEVICE_AUTHORITY_LABEL: NAMED} if requested and claimed is None else None
        exposure = DeviceExposure.CUDA_VISIBLE_DEVICES if claimed is None else \
            DeviceExposure.DRA
        model, why = pod_model(pod, max(requested, 1), strategy, exposure,
                               node_selector=True, only=only)
        if model is None:
            return None, why
        runs.append((model, 1))
    return [m.model_copy(update={"spec": m.spec.model_copy(update={
        "replicas": n, "topology": topology, "priority": priority})}) for m, n in runs], ""


def _plan_by_map(group: PodGroup, members: list[tuple[JSON, PodGroup]], reserve: list[int],
                 text: str, schedule: Callable[[GPUWorkload, Sequence[GPUWorkload]], Decision]
                 ) -> GroupPlan:
    """The group placed by its ``gpu-scheduling-map`` (one map per group, on every
    member: its template's): each member on the node and devices of the line of its
    index in the group (a JobSet's, an LWS's or an Indexed Job's own), the members
    not made yet (``reserve``) too; the map's filters, as a GPUWorkload's map.
    Preempts nobody."""
    first = members[0][0]
    other = next((object_key(p) for p, _ in members[1:]
                  if (pod_meta(p).get("annotations") or {}).get(SCHEDULING_MAP_ANNOTATION)
                  != text), None)
    if other is not None:
        return None, (f"its members carry different {SCHEDULING_MAP_ANNOTATION} annotations "
                      f"({object_key(first)} and {other}): one map places a whole group"), None
    try:
        lines = parse_scheduling_map(text)
    except MapParseError as exc:
        return None, f"invalid {SCHEDULING_MAP_ANNOTATION} annotation: {exc}", None
    nameless = next((object_key(p) for p, g in members if g.index is None), None)
    if nameless is not None:
        return None, (f"pod {nameless} has no index in its group, so the "
                      f"{SCHEDULING_MAP_ANNOTATION} cannot name its line"), None
    slots = [g.index for _, g in members if g.index is not None] + reserve
    missing = [s for s in slots if s not in lines]
    if missing:
        return None, (f"{SCHEDULING_MAP_ANNOTATION} has no line for member index(es) "
                      f"{', '.join(map(str, missing))}; it maps "
                      f"{', '.join(map(str, lines)) or 'none'}"), None
    parts, why = _parts(slot_pods(group, [p for p, _ in members], reserve),
                        SchedulingStrategy.ANNOTATION_MAP.value, Topology.NONE,
                        group_priority(p for p, _ in members))
    if parts is None:
        return None, why, None
    placements: list[Placement] = []
    for part in parts:  # each part's lines checked against its own pods
        mine = slots[len(placements):len(placements) + part.spec.replicas]
        model = part.model_copy(update={"spec": part.spec.model_copy(update={
            "scheduling_map": format_scheduling_map(
                {i: replace(lines[s], index=i) for i, s in enumerate(mine)})})})
        decision = schedule(model, ())
        if not decision.ok:
            which = f"members {', '.join(map(str, mine))}: " if len(parts) > 1 else ""
            return None, (f"by its {SCHEDULING_MAP_ANNOTATION}: {which}{decision.message}"), None
        placements += [p.model_copy(update={"index": len(placements) + p.index})
                       for p in sorted(decision.placements, key=lambda p: p.index)]
    return _entries(group, members, reserve, placements), "", None


def _fit_key(spec: JSON) -> bytes:
    """What node fit and the filters read of a pod ``spec`` (``FIT_FIELDS``; of a
    container only its resources, ports and restart policy, not its env, which a
    webhook may give each member its own), as bytes to compare."""
    def container(c: object) -> object:
        return {k: c.get(k) for k in ("resources", "ports", "restartPolicy")} \
            if isinstance(c, dict) else c
    read = {k: ([container(c) for c in spec[k]] if k in ("containers", "initContainers")
                and isinstance(spec[k], list) else spec[k])
            for k in FIT_FIELDS if k in spec}
    return orjson.dumps(read, option=orjson.OPT_SORT_KEYS)


def _entries(group: PodGroup, members: list[tuple[JSON, PodGroup]], reserve: list[int],
             placements: list[Placement]) -> dict[str, Entry]:
    key = group_ledger_key(group)
    ordered = sorted(placements, key=lambda p: p.index)
    priority = max(pod_priority(pod) for pod, _ in members)
    out = {object_key(pod): Entry(key, Placement(index=p.index, node=p.node,
                                                 devices=list(p.devices)),
                                  len(p.devices), priority=pod_priority(pod), uid=pod_uid(pod),
                                  slot=g.index, generation=g.generation)
           for (pod, g), p in zip(members, ordered[:len(members)], strict=True)}
    reserved = [Entry(key, Placement(index=p.index, node=p.node, devices=list(p.devices)),
                      len(p.devices), priority=priority, slot=i, generation=group.generation,
                      reserved=True)
                for i, p in zip(reserve, ordered[len(members):], strict=True)]
    # each member's Binding names its group's next slots (a leader's, the reserved
    # ones too): a restart books again the slots of members not made yet, and of
    # members gone meanwhile (seedentry.RING)
    slots = [*out.values(), *reserved]
    for k, e in out.items():
        out[k] = replace(e, slots_note=ring_note(slots, e.slot,
                                                 reserved if e.slot == 0 else []))
    out.update((slot_key(group, e.slot or 0), e) for e in reserved)
    return out
