"""What a container is given for its devices, per exposure mode (DESIGN.md "How a
replica sees its devices").

- ``cuda-visible-devices``: ``CUDA_VISIBLE_DEVICES`` = the host indices.
- ``nvidia-visible-devices``: ``NVIDIA_VISIBLE_DEVICES`` = the host indices (the
  container runtime isolates exactly those GPUs and renumbers them from 0), so
  ``CUDA_VISIBLE_DEVICES`` = ``0..n-1``.
- ``device-plugin``: no index env at all; ``nvidia.com/gpu: n`` is requested and the
  kubelet's device plugin picks the devices.
"""

from __future__ import annotations

from collections.abc import Sequence

from api.v1alpha1.types import DeviceExposure

GPU_RESOURCE = "nvidia.com/gpu"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"


def parse_exposure(value: str) -> DeviceExposure:
    """The mode named by ``value``; ValueError listing the valid names otherwise."""
    try:
        return DeviceExposure(value.strip())
    except ValueError:
        names = ", ".join(m.value for m in DeviceExposure)
        raise ValueError(f"unknown device exposure {value!r} (one of: {names})") from None


def device_env(mode: DeviceExposure, devices: Sequence[int]) -> dict[str, str]:
    """Environment variables (in order) that show a container ``devices``."""
    joined = ",".join(str(d) for d in devices)
    if mode is DeviceExposure.CUDA_VISIBLE_DEVICES:
        return {CUDA_VISIBLE_DEVICES: joined}
    if mode is DeviceExposure.NVIDIA_VISIBLE_DEVICES:
        renumbered = ",".join(str(i) for i in range(len(devices)))
        return {NVIDIA_VISIBLE_DEVICES: joined, CUDA_VISIBLE_DEVICES: renumbered}
    return {}


def gpu_limit(mode: DeviceExposure, devices: Sequence[int]) -> int | None:
    """The ``nvidia.com/gpu`` count to request, or None when none is requested."""
    return len(devices) if mode is DeviceExposure.DEVICE_PLUGIN else None
