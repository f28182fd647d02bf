"""NVLink peers from per-link remote PCI bus ids (pure).

NVML tells, for each active NVLink of a device, the PCI bus id of the far end and
what it is. Two cases occur on real machines:

- Direct GPU-to-GPU links (NVLink bridges on PCIe cards, DGX-1/V100 hybrid cube
  mesh): the remote bus id is a GPU of this node; it is mapped to that GPU's index.
- NVSwitch systems (HGX/DGX A100 and H100): every link of a GPU ends on an NVSwitch,
  and the remote bus id is the switch's. GPUs that reach a common NVSwitch are
  peers, which on one HGX baseboard is all-to-all.

When NVML cannot tell the far end's type, a bus id of a local GPU is taken as that
GPU and any other as a switch. Peers are made symmetric. A remote bus id that is
neither a local GPU nor a switch (another host's device, an NPU) yields no peer.
"""

from __future__ import annotations

from collections.abc import Iterable

from internal.agent.nvml.types import RawDevice, RemoteType


def normalize_bus_id(bus_id: str | bytes) -> str:
    """Canonical ``dddddddd:bb:dd.f`` (lower case, 8-digit domain) of a PCI bus id.

    NVML writes ``00000000:18:00.0`` (``busId``) or ``0000:18:00.0`` (``busIdLegacy``);
    both normalise to the same string. Unparseable input is returned lower-cased.
    """
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode(errors="replace")
    s = bus_id.strip().rstrip("\x00").lower()
    try:
        domain, bus, rest = s.split(":")
        device, function = rest.split(".")
        d, b, dev, f = (int(x, 16) for x in (domain, bus, device, function))
        return f"{d:08x}:{b:02x}:{dev:02x}.{f:x}"
    except ValueError:
        return s


def nvlink_peers(devices: Iterable[RawDevice]) -> dict[int, tuple[int, ...]]:
    """Host index -> sorted indices of the devices it has an active NVLink to."""
    devs = list(devices)
    by_bus = {normalize_bus_id(d.pci_bus_id): d.index for d in devs if d.pci_bus_id}
    peers: dict[int, set[int]] = {d.index: set() for d in devs}
    switches: dict[str, set[int]] = {}
    for d in devs:
        for link in d.nvlinks:
            remote = normalize_bus_id(link.remote_pci_bus_id)
            kind = link.remote_type
            if kind is RemoteType.UNKNOWN:
                kind = RemoteType.GPU if remote in by_bus else RemoteType.SWITCH
            if kind is RemoteType.SWITCH:
                switches.setdefault(remote, set()).add(d.index)
            elif kind is RemoteType.GPU:
                other = by_bus.get(remote)
                if other is not None and other != d.index:
                    peers[d.index].add(other)
                    peers[other].add(d.index)
    for members in switches.values():
        for a in members:
            peers[a].update(members - {a})
    return {i: tuple(sorted(p)) for i, p in peers.items()}


def topology_known(devices: Iterable[RawDevice]) -> bool:
    """True when every device's links were read (an empty peer list then means none)."""
    devs = list(devices)
    return bool(devs) and all(d.nvlinks_read and not d.error for d in devs)
