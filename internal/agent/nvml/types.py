"""What one NVML read of a node returns: raw per-device readings (``RawDevice``, as a
backend reports them) and the derived view the agent publishes (``DeviceState``).

A reading NVML does not support on a device is ``None``, never a made-up zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class RemoteType(StrEnum):
    """What the far end of an NVLink is (``nvmlDeviceGetNvLinkRemoteDeviceType``)."""

    GPU = "gpu"
    SWITCH = "switch"  # an NVSwitch: the link joins the node's NVLink fabric
    OTHER = "other"  # e.g. an IBM NPU; not a GPU peer
    UNKNOWN = "unknown"  # NVML could not say: a local GPU's bus id is a GPU, else a switch


@dataclass(frozen=True, slots=True)
class NvLink:
    """One NVLink of a device that NVML reports as active."""

    link: int
    remote_pci_bus_id: str
    remote_type: RemoteType = RemoteType.GPU


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG instance of a MIG-enabled device (its GPU instance's profile and
    placement in slices: ``start``, ``size``)."""

    uuid: str
    profile: str
    memory_total_bytes: int = 0
    start: int = 0
    size: int = 0


@dataclass(frozen=True, slots=True)
class RawDevice:
    """The readings of one device, before health and peers are derived.

    ``error`` is set when the device could not be read at all (GPU lost, unknown
    error): such a device is reported, and reported unhealthy.
    """

    index: int
    uuid: str = ""
    name: str = ""
    pci_bus_id: str = ""
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_gpu: int | None = None  # percent
    temperature_c: int | None = None
    power_mw: int | None = None  # milliwatts, as NVML reports
    ecc_uncorrected_volatile: int | None = None
    mig_enabled: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    nvlinks: tuple[NvLink, ...] = ()
    nvlinks_read: bool = True  # False when the link states could not be read
    xid_errors: tuple[int, ...] = ()  # critical XIDs seen since the agent started
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceState:
    """The published view of one device: readings plus derived health and peers."""

    index: int
    uuid: str
    model: str
    memory_total_bytes: int
    memory_used_bytes: int
    utilization: int  # percent, 0..100
    temperature_c: int
    power_watts: float
    ecc_errors: int
    healthy: bool
    mig_mode: bool
    nvlink_peers: tuple[int, ...]
    unhealthy_reason: str = ""
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSample:
    """Everything one poll of the backend saw."""

    devices: tuple[DeviceState, ...]
    driver_version: str | None = None
    cuda_version: str | None = None
    topology_known: bool = False
    errors: tuple[str, ...] = field(default=())
