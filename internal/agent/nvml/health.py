"""Device health, derived from readings (pure).

A device is unhealthy when:
- it could not be read (GPU lost, unknown NVML error);
- it has volatile uncorrected ECC errors (> 0 since the last driver load);
- a critical XID was seen on it. XIDs that an application causes on a healthy GPU
  (the NVIDIA device plugin's skip list: 13, 31, 43, 45, 68, 109) are ignored.
"""

from __future__ import annotations

from internal.agent.nvml.types import RawDevice

#: XIDs caused by applications, not by the hardware (NVIDIA k8s-device-plugin's list).
APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})


def unhealthy_reason(dev: RawDevice) -> str:
    """Why ``dev`` is unhealthy, or ``""`` when it is healthy."""
    if dev.error:
        return f"nvml error: {dev.error}"
    if dev.ecc_uncorrected_volatile is not None and dev.ecc_uncorrected_volatile > 0:
        return f"{dev.ecc_uncorrected_volatile} uncorrected ECC errors"
    critical = [x for x in dev.xid_errors if x not in APPLICATION_XIDS]
    if critical:
        return "critical XID " + ",".join(str(x) for x in critical)
    return ""


def is_healthy(dev: RawDevice) -> bool:
    return not unhealthy_reason(dev)
