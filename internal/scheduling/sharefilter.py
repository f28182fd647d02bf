"""Placing a replica that takes part of one device: a share (``spec.gpuShare``) or a
MIG instance (``spec.migProfile``).

A share goes on a device that is not MIG-enabled, healthy, with at least
``minGPUMemoryMiB`` of memory (reported), held whole by nobody, with room for it
beside the shares already there (``shares.over``); a device no one holds yet counts
against the node's free GPUs (a counted pod may be given it). A MIG replica takes a
free instance of its profile, of at least ``minGPUMemoryMiB``, on a MIG-enabled
device.

Which device of a node: strategies that pack (``most_free_first = False``: bestFit)
take the device with the least room left that still fits, so shares
fill the fewest devices and whole devices stay free; the others (leastLoaded and the
rest) take the device with the most room, spreading the shares. Ties go to the lowest
index. The node's own order is the strategy's as for whole GPUs; a candidate's
``free`` is the room left on its device after the replica, in thousandths of a
device (MIG: free instances of the profile left on the node), so bestFit's fewest
free left and leastLoaded's most free left mean the same for shares.
"""

from __future__ import annotations

from fractions import Fraction

from api.v1alpha1.sharing import ShareMode
from api.v1alpha1.types import GPUWorkloadSpec
from internal.scheduling.shares import (
    FRACTION_STEP,
    Hold,
    Portion,
    format_fraction,
    mib_text,
    over,
    owner_use,
    parse_fraction,
)
from internal.scheduling.snapshot import NodeInfo
from internal.scheduling.view import Context

Result = tuple[str | None, tuple[int, ...], int]


def wanted(spec: GPUWorkloadSpec) -> Portion | str | None:
    """What one replica asks of one device: a share (Portion), a MIG profile (its
    name), or None (whole devices)."""
    if spec.mig_profile:
        return spec.mig_profile
    share = spec.gpu_share
    if share is None:
        return None
    if share.fraction is not None:
        return Portion(fraction=parse_fraction(share.fraction))
    from internal.scheduling.quantity import memory_mib

    return Portion(memory_mib=max(1, memory_mib(share.memory) or 0))


def share_label(spec: GPUWorkloadSpec) -> str:
    """What ``kubectl get gw`` shows in GPUS for a workload that takes part of a
    device: ``20Gi``, ``0.25``, ``1g.10gb`` ('' for whole devices)."""
    if spec.mig_profile:
        return spec.mig_profile
    return spec.gpu_share.text() if spec.gpu_share is not None else ""


def is_mps(spec: GPUWorkloadSpec) -> bool:
    return spec.gpu_share is not None and spec.gpu_share.mode is ShareMode.MPS


def _others(ctx: Context, node: str, device: int) -> list[tuple[str, bool, Hold]]:
    view = ctx.view
    out = [x for x in view.ledger.device_holds(node, device)
           if x[0] != view.owner and x[0] not in view.released]
    taken = view.taken_portions.get((node, device))
    if taken:
        out.append((view.owner, True, Hold(portions=list(taken))))
    return out


def filter_portion(node: NodeInfo, ctx: Context, want: Portion | str) -> Result:
    """Run the share or MIG placement on one node (after the node's own filters)."""
    if isinstance(want, str):
        return _filter_mig(node, ctx, want)
    return _filter_share(node, ctx, want)


def _filter_share(node: NodeInfo, ctx: Context, want: Portion) -> Result:
    name = node.name
    sharing = ctx.view.ledger.sharing(name)
    pack = not getattr(ctx, "spread", True)
    fits: list[tuple[Fraction, int]] = []
    whole = unknown = small = 0
    fresh_room = ctx.view.free_count(name) >= 1
    min_mem = ctx.workload.spec.min_gpu_memory_mib
    for d in sorted(node.usable):
        if d in sharing.mig:
            continue
        mib = node.devices[d].memory_total_mib
        if min_mem > 0 and (mib is None or mib < min_mem):
            unknown += mib is None
            small += mib is not None
            continue
        holds = _others(ctx, name, d)
        if any(h.whole for _, _, h in holds):
            whole += 1
            continue
        if not holds and not fresh_room:
            continue
        used, unweighed = owner_use(holds, mib)
        if unweighed or want.part(mib) is None:
            unknown += 1
            continue
        if over(used, [want], mib) is None:
            fits.append((1 - used - (want.part(mib) or 0), d))
    if not fits:
        amount = (mib_text(want.memory_mib) if want.memory_mib is not None
                  else format_fraction(want.fraction or Fraction(0)))
        why = f"no shared device with {amount} free"
        if small:
            why += f"; {small} device{'s' if small != 1 else ''} below {min_mem} MiB"
        if whole:
            why += f"; {whole} device{'s' if whole != 1 else ''} held whole"
        if unknown:
            why += f"; {unknown} with unknown memory (no GPUNode report)"
        return why, (), 0
    left, d = min(fits) if pack else min(fits, key=lambda f: (-f[0], f[1]))
    ctx.portions[name] = want
    return None, (d,), int(left / FRACTION_STEP) + 1


def _filter_mig(node: NodeInfo, ctx: Context, profile: str) -> Result:
    name = node.name
    sharing = ctx.view.ledger.sharing(name)
    pack = not getattr(ctx, "spread", True)
    free: dict[int, list[str]] = {}
    held = small = 0
    min_mem = ctx.workload.spec.min_gpu_memory_mib
    for d, instances in sorted(sharing.mig.items()):
        taken = frozenset().union(*(h.migs for _, _, h in _others(ctx, name, d)))
        for uuid, inst in sorted(instances.items()):
            if inst.profile != profile:
                continue
            if inst.memory_mib < min_mem:
                small += 1
            elif uuid in taken:
                held += 1
            else:
                free.setdefault(d, []).append(uuid)
    if not free:
        why = f"no free MIG instance {profile}"
        counts = ([f"{held} held"] if held else []) + (
            [f"{small} below {min_mem} MiB"] if small else [])
        return why + (f" ({', '.join(counts)})" if counts
                      else " (none on a MIG-enabled device)"), (), 0
    total = sum(len(v) for v in free.values())
    order = sorted(free, key=lambda d: ((len(free[d]) if pack else -len(free[d])), d))
    d = order[0]
    ctx.portions[name] = Portion(mig=free[d][0])
    return None, (d,), total
