"""Shares of a device and MIG instances: the arithmetic the ledger keeps.

A device is held in one of three ways (docs/architecture.md, invariant 2):

- *whole*: one owner, nobody beside it (a placement naming the device, nothing more);
- *shared*: many owners, each holding a ``Portion`` with a memory figure
  (``memory=20480Mi``) or a fraction (``fraction=0.25``); the sum over the owners,
  as a part of the device, is never above 1. A memory share needs the device's
  memory (its GPUNode's report) to be weighed; a fraction does not;
- *MIG*: a MIG-enabled device is offered only as its instances, each held by one
  owner (``Portion.mig``: the instance's UUID). It is never held whole nor shared.

What a holder holds on one device is a ``Hold``; two holds of different owners may
stand on the same device only when ``compatible``: both shares, or both MIG
instances with no instance in common. ``over`` says whether a set of shares goes
above the device. Counted per owner, as the ledger counts GPUs: an owner's
booking, its pods and its Jobs are the same share, not three (``owner_use``).

A portion is written as text on a placement (``Placement.share``, ``Placement.mig``)
and on the pod (``SHARE_ANNOTATION``, ``MIG_ANNOTATION``) in the same form, read back
by ``parse_share`` and ``parse_mig``: a restart rebuilds the same ledger.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from api.v1alpha1.types import Placement
from internal.scheduling.quantity import memory_mib

#: the smallest fraction and the finest step of one (a thousandth of a device)
FRACTION_STEP = Fraction(1, 1000)

_FRACTION_RE = re.compile(r"0?\.[0-9]{1,3}|1(\.0{1,3})?")


@dataclass(frozen=True, slots=True)
class Portion:
    """What one replica takes of one device: a memory share, a fraction share, or
    one MIG instance. Exactly one of the three is set."""

    memory_mib: int | None = None
    fraction: Fraction | None = None
    mig: str = ""  # a MIG instance's UUID

    @property
    def is_mig(self) -> bool:
        return bool(self.mig)

    def part(self, device_mib: int | None) -> Fraction | None:
        """The part of the device this share takes; None when it cannot be weighed
        (a memory share of a device whose memory is not reported)."""
        if self.fraction is not None:
            return self.fraction
        if self.memory_mib is None or not device_mib:
            return None
        return Fraction(self.memory_mib, device_mib)

    def text(self) -> str:
        """The share's annotation form (``memory=20480Mi`` or ``fraction=0.25``)."""
        if self.memory_mib is not None:
            return f"memory={self.memory_mib}Mi"
        if self.fraction is not None:
            return f"fraction={format_fraction(self.fraction)}"
        return ""


def format_fraction(f: Fraction) -> str:
    return f"{float(f):.3f}".rstrip("0").rstrip(".") if f != 1 else "1"


def parse_fraction(value: str) -> Fraction:
    """``"0.25"`` -> 1/4. Raises ValueError unless a decimal in (0, 1] with at most
    three decimals."""
    s = str(value).strip()
    if not _FRACTION_RE.fullmatch(s):
        raise ValueError(f"fraction {value!r} is not a decimal in (0, 1] with at most "
                         "3 decimals")
    f = Fraction(s)
    if f <= 0:
        raise ValueError(f"fraction {value!r} is not above 0")
    return f


def parse_share(value: str) -> Portion:
    """``memory=<quantity>`` or ``fraction=<decimal>`` -> a Portion. Raises ValueError."""
    kind, sep, amount = str(value).partition("=")
    kind = kind.strip()
    if sep and kind == "memory":
        mib = memory_mib(amount.strip())
        if mib is None or mib <= 0:
            raise ValueError(f"share {value!r}: memory is not a positive quantity")
        return Portion(memory_mib=mib)
    if sep and kind == "fraction":
        return Portion(fraction=parse_fraction(amount))
    raise ValueError(f"share {value!r} is not memory=<quantity> or fraction=<decimal>")


def parse_mig(value: str) -> Portion:
    """A MIG instance's UUID (``MIG-...``) -> a Portion. Raises ValueError."""
    s = str(value).strip()
    if not re.fullmatch(r"MIG-[A-Za-z0-9-]{1,80}", s):
        raise ValueError(f"MIG instance {value!r} is not a MIG-<uuid>")
    return Portion(mig=s)


def read_portion(share: str | None, mig: str | None) -> Portion | None:
    """The portion a placement or a pod names (None: the device whole). Raises
    ValueError when a value cannot be read or both are set."""
    if share and mig:
        raise ValueError("both a share and a MIG instance named")
    if share:
        return parse_share(share)
    if mig:
        return parse_mig(mig)
    return None


@dataclass(slots=True)
class Hold:
    """What one holder holds of one device: whole, or some portions."""

    whole: bool = False
    portions: list[Portion] = field(default_factory=list)

    @property
    def migs(self) -> frozenset[str]:
        return frozenset(p.mig for p in self.portions if p.is_mig)

    @property
    def shares(self) -> list[Portion]:
        return [p for p in self.portions if not p.is_mig]

    def kind(self) -> str:
        if self.whole:
            return "whole"
        return "mig" if self.migs else "share"


def compatible(a: Hold, b: Hold) -> bool:
    """May holds ``a`` and ``b`` of two owners stand on one device?"""
    if a.whole or b.whole:
        return False
    if a.migs or b.migs:
        return bool(a.migs) and bool(b.migs) and not (a.migs & b.migs) \
            and not a.shares and not b.shares
    return True


def owner_use(holds: Iterable[tuple[str, bool, Hold]],
              device_mib: int | None) -> tuple[Fraction, int]:
    """(part of the device the shares take, shares that cannot be weighed) over
    ``(owner, is_booking, hold)``: per owner the larger of its bookings' and its
    holdings' sums (a booking and its pods are the same share)."""
    booked: dict[str, Fraction] = {}
    held: dict[str, Fraction] = {}
    unknown = 0
    for owner, is_booking, h in holds:
        side = booked if is_booking else held
        for p in h.shares:
            part = p.part(device_mib)
            if part is None:
                unknown += 1
                continue
            side[owner] = side.get(owner, Fraction(0)) + part
    total = sum((max(booked.get(o, Fraction(0)), held.get(o, Fraction(0)))
                 for o in booked.keys() | held.keys()), Fraction(0))
    return total, unknown


def over(used: Fraction, wanted: Iterable[Portion], device_mib: int | None) -> str | None:
    """Why ``wanted`` does not fit beside ``used`` on a device (None: it fits)."""
    total = used
    for p in wanted:
        part = p.part(device_mib)
        if part is None:
            return "device memory unknown (no GPUNode report)"
        total += part
    if total > 1:
        return f"{free_text(used, device_mib)} free of the device"
    return None


def free_text(used: Fraction, device_mib: int | None) -> str:
    """'60Gi' (memory known) or '0.75' (as a part of the device)."""
    left = max(Fraction(0), 1 - used)
    if device_mib:
        return mib_text(int(left * device_mib))
    return format_fraction(left)


def mib_text(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG instance of a device, as the GPUNode reports it."""

    uuid: str
    profile: str
    memory_mib: int = 0


@dataclass(slots=True)
class NodeSharing:
    """What the ledger needs to weigh shares and MIG on one node: the memory of its
    healthy devices and, per MIG-enabled device, its instances."""

    memory: Mapping[int, int | None] = field(default_factory=dict)
    mig: Mapping[int, Mapping[str, MigInstance]] = field(default_factory=dict)

    def instance(self, device: int, uuid: str) -> MigInstance | None:
        return (self.mig.get(device) or {}).get(uuid)


def placement_portion(p: Placement) -> Portion | None:
    """The portion a placement names (None: its devices whole). A value that cannot
    be read counts as the device whole: never as holding less than it may."""
    try:
        return read_portion(p.share, p.mig)
    except ValueError:
        return None


def hold_of(placements: Iterable[Placement], node: str, device: int) -> Hold:
    """What ``placements`` (one holder's) hold of ``device`` of ``node``."""
    h = Hold()
    for p in placements:
        if p.node != node or device not in p.devices:
            continue
        portion = placement_portion(p)
        if portion is None:
            h.whole = True
        else:
            h.portions.append(portion)
    return h


def portion_problem(sharing: NodeSharing, usable: frozenset[int], device: int, h: Hold,
                    others: Iterable[tuple[str, bool, Hold]]) -> str | None:
    """Why the MIG instances or shares of ``h`` do not fit on ``device`` beside the
    holds of the other owners (None: they fit)."""
    for uuid in sorted(h.migs):
        if sharing.instance(device, uuid) is None:
            return f"no MIG instance {uuid}"
    if not h.shares:
        return None
    if device in sharing.mig or device not in usable:
        return "not usable for a share (MIG-enabled or unhealthy)"
    mib = sharing.memory.get(device)
    used, unknown = owner_use(others, mib)
    if unknown:
        return f"{unknown} share(s) cannot be weighed (device memory unknown)"
    return over(used, h.shares, mib)


def describe(holds: Iterable[tuple[str, bool, Hold]], device_mib: int | None,
             instances: int | None) -> str | None:
    """How a device is held, for people: ``3 shares, 60Gi of 80Gi``, ``2 shares,
    0.5 of 1``, ``MIG: 3 of 7 instances held``; None when held whole or by nobody
    (and not MIG-enabled)."""
    holds = list(holds)
    if instances is not None:
        held = frozenset().union(*(h.migs for _, _, h in holds))
        return f"MIG: {len(held)} of {instances} instances held"
    if not holds or any(h.whole for _, _, h in holds):
        return None
    shares = len({o for o, _, _ in holds})
    used, unknown = owner_use(holds, device_mib)
    word = "share" if shares == 1 else "shares"
    if device_mib and not unknown:
        return f"{shares} {word}, {mib_text(int(used * device_mib))} of {mib_text(device_mib)}"
    return f"{shares} {word}, {format_fraction(used)} of 1" + (
        f" (+{unknown} unweighed)" if unknown else "")
