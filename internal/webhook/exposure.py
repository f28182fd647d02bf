"""The webhook's side of the exposure modes: parsing the flag and the GPU limit; the
environment itself is ``internal.scheduling.exposure.device_env``, shared with the
controller (docs/architecture.md, "How a replica sees its devices").

- ``cuda-visible-devices``: ``CUDA_VISIBLE_DEVICES`` = the host indices.
- ``nvidia-visible-devices``: ``NVIDIA_VISIBLE_DEVICES`` = the host indices (the
  container runtime isolates exactly those GPUs and renumbers them from 0), so
  ``CUDA_VISIBLE_DEVICES`` = ``0..n-1``.
- ``device-plugin``: no index env at all; ``nvidia.com/gpu: n`` is requested and the
  kubelet's device plugin picks the devices.
- ``dra``: refused here (GPUWorkloads only; see controllers/dra/claims.py); a pod
  group's member names its own claim (``groupexposure.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from api.v1alpha1.keys import GPU_RESOURCE
from api.v1alpha1.types import DeviceExposure
from internal.scheduling.exposure import (
    CUDA_VISIBLE_DEVICES,
    NVIDIA_VISIBLE_DEVICES,
    device_env,
)

__all__ = ["CUDA_VISIBLE_DEVICES", "GPU_RESOURCE", "NVIDIA_VISIBLE_DEVICES", "device_env",
           "gpu_limit", "parse_exposure"]


def parse_exposure(value: str) -> DeviceExposure:
    """The mode named by ``value``; ValueError listing the valid names otherwise."""
    try:
        mode = DeviceExposure(value.strip())
    except ValueError:
        names = ", ".join(m.value for m in DeviceExposure)
        raise ValueError(f"unknown device exposure {value!r} (one of: {names})") from None
    if mode is DeviceExposure.DRA:
        # A claim must be made and allocated before the pod exists: the seed path's
        # pods are created by their StatefulSet, so only GPUWorkloads serve dra.
        raise ValueError("device exposure 'dra' is served by GPUWorkloads only, not the "
                         "seed path's pods (their ResourceClaims would have to exist first)")
    return mode


def gpu_limit(mode: DeviceExposure, devices: Sequence[int]) -> int | None:
    """The ``nvidia.com/gpu`` count to request, or None when none is requested."""
    return len(devices) if mode is DeviceExposure.DEVICE_PLUGIN else None
