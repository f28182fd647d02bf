"""The filters one node goes through for one replica, and the messages that say why
a node was rejected (kube-scheduler's voice: ``node1: 1 free GPU, needs 2``).

In order (the first that fails gives the node's reason): node exists; not refused
for reporting more GPUs than a node may have (``bounds.py``); Ready; not
cordoned and every NoSchedule/NoExecute taint tolerated by the template (for every
strategy, an annotation map's named nodes included); not a node whose kubelet
rejected one of the workload's pods in the last 5 minutes (``rejections.py``);
labels match spec.nodeSelector;
node fit, what the kubelet checks again at admission (``fit_reason_of``: the
template's nodeSelector and required node affinity, its CPU, memory, ephemeral
storage and extended resources, one more pod, its host ports); the GPUNode's
heartbeat not stale; enough free healthy devices with at least
minGPUMemoryMiB; an NVLink-connected set when topology is Required; last, on a node
with room, its device authority (``authority.py``: a named placement never goes where
the device plugin counts GPUs, nor a counted one where the ledger names them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.v1alpha1.types import DeviceExposure, Topology
from internal.scheduling.authority import refusal as authority_refusal
from internal.scheduling.devicepicker import pick_devices
from internal.scheduling.nodefit import PODS, pods_reason
from internal.scheduling.rejections import avoid_reason
from internal.scheduling.sharefilter import filter_portion, wanted
from internal.scheduling.snapshot import NodeInfo
from internal.scheduling.taints import tolerates, untolerated_taint
from internal.scheduling.view import Context, View

#: a node whose GPU agent stopped reporting offers nothing (its placements stay)
STALE_REASON = "GPUNode heartbeat stale (GPU agent not reporting), GPUs not offered"
#: a ``deviceExposure: dra`` workload needs a node whose GPUs the DRA driver publishes
NO_SLICES_REASON = "no ResourceSlices of the DRA driver (deviceExposure dra)"
#: the taint a cordoned node carries (kube-scheduler's TaintNodesByCondition)
CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def gpus_word(n: int) -> str:
    return f"{n} free GPU" if n == 1 else f"{n} free GPUs"


def holder_text(name: str) -> str:
    """A holder as messages name it: a workload's ``ns/name``; a pod book's key
    ``Kind:ns/name`` (a StatefulSet's pods, a pod of its own) as ``Kind ns/name``."""
    kind, sep, rest = name.partition(":")
    return f"{kind} {rest}" if sep and "/" not in kind else name


def free_text(n: int, node: NodeInfo, view: View) -> str:
    """'3 free GPUs (1 unhealthy)': the free count, naming the devices that would be
    free but are not offered because they are unhealthy (held ones are not free)."""
    bad = sum(1 for d in node.unhealthy if not view.held_by_other(node.name, d))
    return gpus_word(n) + (f" ({bad} unhealthy)" if bad else "")


def filter_node(
    name: str, ctx: Context, *, exact: tuple[int, ...] | None = None, pick: bool = True
) -> tuple[str | None, tuple[int, ...] | None, int]:
    """Run the filters on one node. Returns (reason or None, devices, free count).

    ``pick=False``: where the plain rule picks the devices (no topology to honour, or
    one device) and the node has room, they cannot fail to be picked: devices is
    None and ``pick_on`` picks them later, for the node chosen among the feasible
    ones only (the same devices, while the view has not changed)."""
    ctx.visited += 1
    node = ctx.snapshot.get(name)
    if node is None:
        return "node not found", (), 0
    if node.refused:
        return node.refused, (), 0
    if not node.ready:
        return "NotReady", (), 0
    spec = ctx.workload.spec
    # Cordons and taints bind every strategy, a map's named nodes included, unless
    # the template tolerates them (as kube-scheduler does).
    if node.unschedulable and not tolerates(ctx.tolerations, CORDON_TAINT):
        return "unschedulable (cordoned)", (), 0
    taint = untolerated_taint(node, ctx.tolerations)
    if taint is not None:
        val = f"={taint.get('value')}" if taint.get("value") else ""
        return f"taint {taint.get('key')}{val}:{taint.get('effect')} not tolerated", (), 0
    if ctx.workload.status.rejections:
        why = avoid_reason(ctx.workload.status.rejections, name)
        if why is not None:
            return why, (), 0
    if exact is None:
        for k, v in spec.node_selector.items():
            if node.labels.get(k) != v:
                return f"does not match nodeSelector {k}={v}", (), 0
    why = fit_reason_of(node, ctx)
    if why is not None:
        return why, (), 0
    if node.stale:
        return STALE_REASON, (), 0
    if spec.device_exposure is DeviceExposure.DRA and not node.dra_driver:
        return NO_SLICES_REASON, (), 0
    why, devices, free = _filter_devices(node, ctx, exact, pick)
    if why is None:  # room for it: may this kind of holder have it here?
        why = authority_refusal(name, node.labels, ctx.view, counted=ctx.counted,
                                dra=spec.device_exposure is DeviceExposure.DRA)
        if why is not None:
            return why, (), free
    return why, devices, free


def pick_on(node: NodeInfo, ctx: Context) -> tuple[int, ...]:
    """The devices one replica gets on ``node``, a node ``filter_node(pick=False)``
    passed without picking them (the view unchanged since)."""
    why, devices, _ = _filter_devices(node, ctx, None)
    assert why is None and devices is not None, why
    return devices


def _filter_devices(
    node: NodeInfo, ctx: Context, exact: tuple[int, ...] | None, pick: bool = True
) -> tuple[str | None, tuple[int, ...] | None, int]:
    """The devices (or the share) one replica would get on ``node``, or why none."""
    name, spec = node.name, ctx.workload.spec
    want = wanted(spec)
    if want is not None:
        return filter_portion(node, ctx, want)
    view = ctx.view
    free = view.free_devices(name)
    free_count = view.free_count(name, free)
    min_mem = spec.min_gpu_memory_mib

    def mem_ok(d: int) -> bool:
        info = node.devices.get(d)
        if info is None:
            return False
        if min_mem <= 0:
            return True
        return info.memory_total_mib is not None and info.memory_total_mib >= min_mem

    if exact is not None:
        return _filter_exact(node, ctx, exact, mem_ok)
    if ctx.counted:
        if free_count < ctx.gpus:
            return f"{free_text(free_count, node, view)}, needs {ctx.gpus}", (), free_count
        return None, (), free_count
    # no memory floor: every free device the node reports is eligible (mem_ok's
    # answer without a call per device: a decision asks it of every node it visits)
    eligible = sorted(free.intersection(node.devices) if min_mem <= 0 else
                      (d for d in free if mem_ok(d)))
    available = min(len(eligible), free_count)
    if available < ctx.gpus:
        why = f"{free_text(available, node, view)}, needs {ctx.gpus}"
        low_mem = len(free) - len(eligible)
        if low_mem:
            unknown = any(
                node.devices[d].memory_total_mib is None for d in free if d in node.devices
            )
            why += (
                f" ({low_mem} with unknown memory, no GPUNode report)"
                if unknown
                else f" ({low_mem} below {min_mem} MiB)"
            )
        return why, (), free_count
    # the links are read only for a set of more than one device with a topology
    links = spec.topology is not Topology.NONE and ctx.gpus > 1
    if not pick and not links:  # the plain rule finds a set among ``available``
        return None, None, free_count
    chosen = pick_devices(
        eligible,
        ctx.gpus,
        topology=spec.topology,
        nvlink_peers={i: d.nvlink_peers for i, d in node.devices.items()} if links else None,
        topology_known=node.topology_known,
    )
    if chosen.devices is None:
        return chosen.reason, (), free_count
    return None, chosen.devices, free_count


def fit_reason_of(node: NodeInfo, ctx: Context) -> str | None:
    """What the kubelet would refuse one more replica's pod on ``node`` for: the
    template's nodeSelector and required node affinity, then its requests, one more
    pod and its host ports against what the node's pods and the replicas booked
    there take (``nodefit.py``, ``nodeusage.py``), this decision's own included."""
    fit = ctx.fit
    if fit.selective:
        why = fit.selector_reason(node.labels, node.name)
        if why is not None:
            return why
    mine = ctx.view.replicas_on.get(node.name, 0) if ctx.view.replicas_on else 0
    if fit.empty:  # the common case: only the pod count (no copies, no bookings read)
        cap = node.allocatable.get(PODS)
        return None if cap is None else pods_reason(
            ctx.snapshot.usage.pods_on(node.name) + mine, cap)
    return ctx.snapshot.usage.refusal(node.name, node.allocatable, fit, mine,
                                      ctx.view.ledger, ctx.view.released)


def _filter_exact(
    node: NodeInfo, ctx: Context, exact: tuple[int, ...], mem_ok: Any
) -> tuple[str | None, tuple[int, ...], int]:
    name = node.name
    problems: list[str] = []
    for d in exact:
        if d not in node.devices:
            problems.append(f"device {d} does not exist ({len(node.devices)} GPUs)")
        elif not node.devices[d].healthy:
            problems.append(f"device {d} unhealthy")
        elif node.devices[d].mig_mode:
            problems.append(f"device {d} MIG-enabled: offered only as MIG instances "
                            "(spec.migProfile)")
        elif ctx.view.held_by_other(name, d):
            problems.append(f"device {d} held by "
                            f"{holder_text(str(ctx.view.ledger.holder(name, d)))}")
        elif not mem_ok(d):
            problems.append(f"device {d} below {ctx.workload.spec.min_gpu_memory_mib} MiB")
    if problems:
        return "; ".join(problems), (), 0
    # unnamed (counted) holdings on the node must still leave room for what we name
    new = [d for d in exact if d not in ctx.view.taken.get(name, ())]
    free_count = ctx.view.free_count(name)
    if new and free_count < len(new):
        return f"{gpus_word(free_count)}, needs {len(new)} (other GPU pods)", (), free_count
    return None, exact, free_count


def group_reasons(
    reasons: Mapping[str, str], *, others: int = 0, need: int = 0, max_names: int = 3
) -> str:
    """'node1: 1 free GPU, needs 2; node2, node3: NotReady; 4990 other nodes: ...'"""
    by_reason: dict[str, list[str]] = {}
    for node in sorted(reasons):
        by_reason.setdefault(reasons[node], []).append(node)
    parts = []
    for reason, nodes in sorted(by_reason.items(), key=lambda kv: kv[1][0]):
        shown = ", ".join(nodes[:max_names])
        if len(nodes) > max_names:
            shown += f" and {len(nodes) - max_names} more"
        parts.append(f"{shown}: {reason}")
    if others:
        word = "node" if others == 1 else "nodes"
        parts.append(f"{others} other {word}: fewer than {gpus_word(need)}")
    return "; ".join(parts) if parts else "no nodes"
