"""Where a seed-path pod goes: its line of the ``gpu-scheduling-map`` annotation
checked against the nodes and holders (``check_exact``), or, without a map, one
replica placed by the default strategy (``plan_default``). Pure: it reads a
read-only ``PlacementView`` under the state's lock (``PlacementState.book_seed``)
and returns an ``Entry`` to book, or why the pod cannot go anywhere, in the words of
its ``FailedScheduling`` Event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.v1alpha1.keys import SCHEDULING_MAP_ANNOTATION
from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement, SchedulingStrategy
from controllers.placement_state import PlacementView
from controllers.seedbook import (
    Entry,
    describe_holder,
    devs_text,
    owner_key,
    pod_meta,
    pod_priority,
    pod_spec,
)
from internal.objects import JSON
from internal.scheduling.mapparser import MapParseError, parse_scheduling_map
from internal.scheduling.podindex import pod_index
from internal.scheduling.pods import pod_gpu_request, pod_uid
from internal.scheduling.snapshot import tolerates, untolerated_taint

#: the taint a cordoned node carries (the node lifecycle controller adds it)
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def plan(view: PlacementView, pod: JSON, default_strategy: str) -> tuple[Entry | None, str]:
    """Where ``pod`` goes, or why it cannot go anywhere: read from ``view``,
    under the state lock (``PlacementState.book_seed``)."""
    text = (pod_meta(pod).get("annotations") or {}).get(SCHEDULING_MAP_ANNOTATION)
    index, source = pod_index(pod)
    if text is None or not text.strip():
        return plan_default(view, pod, index, default_strategy)
    try:
        lines = parse_scheduling_map(text)
    except MapParseError as exc:
        return None, f"invalid {SCHEDULING_MAP_ANNOTATION} annotation: {exc}"
    if index is None:
        return None, f"cannot tell the pod's replica index: {source}"
    line = lines.get(index)
    if line is None:
        return None, (f"{SCHEDULING_MAP_ANNOTATION} has no entry for replica index "
                      f"{index} ({source}); it maps index(es) "
                      f"{', '.join(map(str, lines))}")
    key = owner_key(pod)
    why = check_exact(view, key, index, line.node, line.devices,
                      tuple(pod_spec(pod).get("tolerations") or ()))
    if why:
        return None, why
    return Entry(key, Placement(index=index, node=line.node, devices=list(line.devices)),
                 len(line.devices), priority=pod_priority(pod), uid=pod_uid(pod)), ""


def check_exact(view: PlacementView, key: str, index: int, node: str,
                devices: tuple[int, ...],
                tolerations: tuple[Mapping[str, Any], ...] = ()) -> str:
    info = view.node(node)
    where = f"replica index {index}: node {node}"
    if info is None:
        return f"{where} does not exist"
    if not info.ready:
        return f"{where} is not Ready"
    if info.unschedulable and not tolerates(tolerations, CORDON_TAINT):
        return f"{where} is cordoned (unschedulable) and the pod does not tolerate it"
    taint = untolerated_taint(info, tolerations)
    if taint is not None:
        return (f"{where} has the taint {taint.get('key')}"
                f"{'=' + taint['value'] if taint.get('value') else ''}:"
                f"{taint.get('effect')} that the pod does not tolerate")
    missing = [d for d in devices if d not in info.devices]
    if missing:
        return (f"{where}: device(s) {devs_text(missing)} beyond the node's "
                f"{len(info.devices)} GPU(s)")
    unhealthy = [d for d in devices if not info.devices[d].healthy]
    if unhealthy:
        return f"{where}: device(s) {devs_text(unhealthy)} unhealthy"
    held: dict[int, str] = {}
    for d in devices:
        holder = view.holder(node, d)
        if holder is not None and holder != key:
            held[d] = holder
    if held:
        owners = ", ".join(describe_holder(h) for h in sorted(set(held.values())))
        return f"{where}: device(s) {devs_text(sorted(held))} held by {owners}"
    new = [d for d in devices if view.holder(node, d) != key]
    free = view.free_count(node)
    if len(new) > free:
        return f"{where}: {free} free GPU(s), needs {len(new)} (other GPU pods)"
    return ""


def plan_default(view: PlacementView, pod: JSON, index: int | None,
                 default_strategy: str) -> tuple[Entry | None, str]:
    """No map: one replica by the default strategy."""
    meta, spec = pod_meta(pod), pod_spec(pod)
    requested = pod_gpu_request(pod)
    gpus = min(max(requested, 1), 64)
    counted = requested > 0  # the device plugin picks the devices
    strategy = default_strategy
    if strategy == SchedulingStrategy.ANNOTATION_MAP.value:
        strategy = SchedulingStrategy.LEAST_LOADED.value
    exposure = DeviceExposure.DEVICE_PLUGIN if counted else \
        DeviceExposure.CUDA_VISIBLE_DEVICES
    try:
        model = GPUWorkload.model_validate({
            # the model's key is the pod's own ``Pod:`` ledger key
            "metadata": {"name": meta.get("name"),
                         "namespace": f"Pod:{meta.get('namespace') or 'default'}"},
            "spec": {"gpusPerReplica": gpus, "schedulingStrategy": strategy,
                     "deviceExposure": exposure.value,
                     "nodeSelector": dict(spec.get("nodeSelector") or {}),
                     "template": {"spec": {"tolerations": [
                         dict(t) for t in spec.get("tolerations") or ()]}}},
        })
    except ValueError as exc:
        return None, f"cannot place the pod: {exc}"
    decision = view.schedule(model)
    if not decision.ok or not decision.placements:
        return None, decision.message or "no node fits"
    p = decision.placements[0]
    i = index if index is not None else 0
    if decision.counted:
        return Entry(model.key, Placement(index=i, node=p.node), gpus,
                     priority=pod_priority(pod), uid=pod_uid(pod)), ""
    return Entry(owner_key(pod), Placement(index=i, node=p.node, devices=list(p.devices)),
                 gpus, priority=pod_priority(pod), uid=pod_uid(pod)), ""
