"""Where a seed-path pod goes: its line of the ``gpu-scheduling-map`` annotation
checked by the shared filters of ``internal/scheduling`` (the exact-map check of a
mapped GPUWorkload, ``filters.filter_node``: one notion of "held by someone else",
one set of messages), or, without a map, one replica placed by the default
strategy (``plan_default``): a pod that requests ``nvidia.com/gpu`` gets named
devices on a node whose device authority is named, else counted GPUs on a node the
device plugin may serve (never counted on a named node, nor named on a counted one:
``internal/scheduling/authority.py``). Pure: it reads a read-only ``PlacementView`` in a
scheduling pass (``PlacementState.seeds.book_seed``) and returns an ``Entry`` to book, or
why the pod cannot go anywhere, in the words of its ``FailedScheduling`` Event.
"""

from __future__ import annotations

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL, SCHEDULING_MAP_ANNOTATION
from api.v1alpha1.types import DeviceExposure, GPUWorkload, Placement, SchedulingStrategy
from controllers.placement.state import PlacementView
from controllers.podbinding.seedbook import (
    Entry,
    owner_key,
    pod_meta,
    pod_priority,
    pod_spec,
)
from internal.objects import JSON
from internal.scheduling.authority import NAMED
from internal.scheduling.filters import group_reasons
from internal.scheduling.mapparser import MapParseError, parse_scheduling_map
from internal.scheduling.outcome import Decision
from internal.scheduling.podindex import pod_index
from internal.scheduling.pods import pod_gpu_request, pod_uid

#: what node fit (``internal/scheduling/nodefit.py``) reads of a pod's spec
FIT_FIELDS = ("containers", "initContainers", "overhead", "hostNetwork", "nodeSelector",
              "affinity", "tolerations")
#: the most GPUs one seed pod may ask for: a GPUWorkload replica's (gpusPerReplica)
MAX_GPUS_PER_POD = 64


def plan(view: PlacementView, pod: JSON, default_strategy: str) -> tuple[Entry | None, str]:
    """Where ``pod`` goes, or why it cannot go anywhere: read from ``view``,
    under the state lock (``PlacementState.seeds.book_seed``)."""
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
    model, why = pod_model(pod, len(line.devices), SchedulingStrategy.LEAST_LOADED.value,
                           DeviceExposure.CUDA_VISIBLE_DEVICES)
    if model is not None:
        why = view.check_exact(model, key, line.node, line.devices) or ""
        why = why and f"{line.node}: replica {index}: {why}"
    if why:
        return None, why
    return Entry(key, Placement(index=index, node=line.node, devices=list(line.devices)),
                 len(line.devices), priority=pod_priority(pod), uid=pod_uid(pod)), ""


def pod_model(pod: JSON, gpus: int, strategy: str, exposure: DeviceExposure,
              node_selector: bool = False, only: dict[str, str] | None = None,
              ) -> tuple[GPUWorkload | None, str]:
    """The pod as one replica of a GPUWorkload for the shared scheduler: ``gpus``
    GPUs, its tolerations (and its nodeSelector with ``node_selector``), keyed by
    its own ``Pod:`` ledger key; its template is what node fit reads of the pod
    (its containers' requests and host ports, its nodeSelector and required node
    affinity); ``only``: labels its node must have besides. (None, why) when it
    cannot be read as one."""
    meta, spec = pod_meta(pod), pod_spec(pod)
    try:
        return GPUWorkload.model_validate({
            # the model's key is the pod's own ``Pod:`` ledger key
            "metadata": {"name": meta.get("name"),
                         "namespace": f"Pod:{meta.get('namespace') or 'default'}"},
            "spec": {"gpusPerReplica": gpus, "schedulingStrategy": strategy,
                     "deviceExposure": exposure.value,
                     "nodeSelector": (dict(spec.get("nodeSelector") or {})
                                      if node_selector else {}) | (only or {}),
                     # what the kubelet checks again: node fit reads it
                     "template": {"spec": {k: spec[k] for k in FIT_FIELDS if k in spec}}},
        }), ""
    except ValueError as exc:
        return None, f"cannot place the pod: {exc}"


def plan_default(view: PlacementView, pod: JSON, index: int | None,
                 default_strategy: str) -> tuple[Entry | None, str]:
    """No map: one replica by the default strategy."""
    requested = pod_gpu_request(pod)
    if requested > MAX_GPUS_PER_POD:
        return None, (f"the pod requests {requested} nvidia.com/gpu, more than the "
                      f"{MAX_GPUS_PER_POD} one pod may have")
    gpus = max(requested, 1)
    counted = requested > 0  # the device plugin picks the devices
    strategy = default_strategy
    if strategy == SchedulingStrategy.ANNOTATION_MAP.value:
        strategy = SchedulingStrategy.LEAST_LOADED.value
    named: Decision | None = None
    if counted:  # named devices on a named node first (one authority per node)
        model, why = pod_model(pod, gpus, strategy, DeviceExposure.CUDA_VISIBLE_DEVICES,
                               node_selector=True, only={DEVICE_AUTHORITY_LABEL: NAMED})
        if model is None:
            return None, why
        named = view.schedule(model)
        if named.ok and named.placements:
            p = named.placements[0]
            return Entry(owner_key(pod), Placement(index=index or 0, node=p.node,
                                                   devices=list(p.devices)),
                         gpus, priority=pod_priority(pod), uid=pod_uid(pod)), ""
    exposure = DeviceExposure.DEVICE_PLUGIN if counted else \
        DeviceExposure.CUDA_VISIBLE_DEVICES
    model, why = pod_model(pod, gpus, strategy, exposure, node_selector=True)
    if model is None:
        return None, why
    decision = view.schedule(model)
    if not decision.ok or not decision.placements:
        return None, _why_not(decision, named)
    p = decision.placements[0]
    i = index if index is not None else 0
    if decision.counted:
        return Entry(model.key, Placement(index=i, node=p.node), gpus,
                     priority=pod_priority(pod), uid=pod_uid(pod)), ""
    return Entry(owner_key(pod), Placement(index=i, node=p.node, devices=list(p.devices)),
                 gpus, priority=pod_priority(pod), uid=pod_uid(pod)), ""


def _why_not(counted: Decision, named: Decision | None) -> str:
    """Why neither pass placed the pod: each node's reason from the pass its
    authority allows (a named node's from the named pass)."""
    if named is None or not named.reasons:
        return counted.message or "no node fits"
    reasons = dict(counted.reasons)
    for node, why in named.reasons.items():
        if not why.startswith("does not match nodeSelector"):
            reasons[node] = why
    return group_reasons(reasons) if reasons else counted.message or "no node fits"
