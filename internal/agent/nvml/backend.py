"""The NVML access interface and the one function that turns its readings into a
published :class:`NodeSample` (health and NVLink peers are derived here, identically
for every backend)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from internal.agent.nvml.health import unhealthy_reason
from internal.agent.nvml.topology import nvlink_peers, topology_known
from internal.agent.nvml.types import DeviceState, NodeSample, RawDevice


@runtime_checkable
class NvmlBackend(Protocol):
    """Reads the GPUs of this node. Implementations: ``RealNvmlBackend`` (pynvml) and
    ``FixtureBackend`` (recorded JSON)."""

    name: str

    def device_count(self) -> int: ...

    def read_device(self, index: int) -> RawDevice:
        """All readings of device ``index``; never raises for a per-field
        NotSupported (that field is None). A device that cannot be read at all is
        returned with ``error`` set."""
        ...

    def driver_version(self) -> str | None: ...

    def cuda_version(self) -> str | None: ...

    def close(self) -> None: ...


def device_state(raw: RawDevice, peers: tuple[int, ...]) -> DeviceState:
    reason = unhealthy_reason(raw)
    util = raw.utilization_gpu or 0
    return DeviceState(
        index=raw.index,
        uuid=raw.uuid,
        model=raw.name,
        memory_total_bytes=max(0, raw.memory_total_bytes or 0),
        memory_used_bytes=max(0, raw.memory_used_bytes or 0),
        utilization=min(100, max(0, util)),
        temperature_c=raw.temperature_c or 0,
        power_watts=round(max(0, raw.power_mw or 0) / 1000.0, 3),
        ecc_errors=max(0, raw.ecc_uncorrected_volatile or 0),
        healthy=not reason,
        mig_mode=bool(raw.mig_enabled),
        nvlink_peers=peers,
        unhealthy_reason=reason,
        mig_devices=raw.mig_devices if raw.mig_enabled else (),
    )


def sample(backend: NvmlBackend) -> NodeSample:
    """One poll of ``backend``: every device read, health and peers derived."""
    raws = [backend.read_device(i) for i in range(backend.device_count())]
    peers = nvlink_peers(raws)
    devices = tuple(device_state(r, peers.get(r.index, ())) for r in raws)
    return NodeSample(
        devices=devices,
        driver_version=backend.driver_version(),
        cuda_version=backend.cuda_version(),
        topology_known=topology_known(raws),
        errors=tuple(f"device {r.index}: {r.error}" for r in raws if r.error),
    )
