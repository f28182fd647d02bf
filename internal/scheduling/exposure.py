"""What a container is given for its devices, per exposure mode (docs/architecture.md,
"How a replica sees its devices"). One function for the controller's children and the
webhook's seed pods, so both give the same environment for the same mode.

- ``cuda-visible-devices``: the container sees every GPU with host numbering
  (``NVIDIA_VISIBLE_DEVICES=all``); ``CUDA_VISIBLE_DEVICES`` = the host indices.
  Not isolation: a process may ignore it.
- ``nvidia-visible-devices``: ``NVIDIA_VISIBLE_DEVICES`` = the devices' UUIDs (host
  indices when unknown); the container runtime exposes exactly those GPUs and
  renumbers them from 0, so ``CUDA_VISIBLE_DEVICES`` = ``0..n-1``.
- ``device-plugin``: no index env at all; ``nvidia.com/gpu: n`` is requested and the
  kubelet's device plugin picks the devices.
- ``dra``: no index env either; the replica's ResourceClaim names its devices and
  the DRA driver shows the container exactly those, renumbered from 0
  (controllers/dra/claims.py).

Part of a device (``portion_env``): a share is shown its device as above; a MIG
instance is named by its UUID (``CUDA_VISIBLE_DEVICES=MIG-<uuid>``; in
``nvidia-visible-devices`` mode ``NVIDIA_VISIBLE_DEVICES=MIG-<uuid>`` and
``CUDA_VISIBLE_DEVICES=0``). An MPS share also gets what its share says: a memory
share ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=<MiB>M`` (its one device, as the client
numbers it), a fraction ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (the fraction, in
percent). Time-slicing isolates nothing: the variables are the whole device's.
"""

from __future__ import annotations

from collections.abc import Sequence

from api.v1alpha1.types import DeviceExposure

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"


def device_env(mode: DeviceExposure, devices: Sequence[int],
               uuids: Sequence[str] | None = None) -> dict[str, str]:
    """Environment variables (in order) that show a container ``devices``."""
    host = ",".join(str(d) for d in devices)
    if mode is DeviceExposure.CUDA_VISIBLE_DEVICES:
        return {NVIDIA_VISIBLE_DEVICES: "all", CUDA_VISIBLE_DEVICES: host}
    if mode is DeviceExposure.NVIDIA_VISIBLE_DEVICES:
        shown = ",".join(uuids) if uuids else host
        renumbered = ",".join(str(i) for i in range(len(devices)))
        return {NVIDIA_VISIBLE_DEVICES: shown, CUDA_VISIBLE_DEVICES: renumbered}
    return {}


def portion_env(mode: DeviceExposure, mig: str | None, share: str | None,
                mps: bool) -> dict[str, str]:
    """What a replica holding part of its device gets over ``device_env``'s."""
    out: dict[str, str] = {}
    if mig:
        if mode is DeviceExposure.NVIDIA_VISIBLE_DEVICES:
            out = {NVIDIA_VISIBLE_DEVICES: mig, CUDA_VISIBLE_DEVICES: "0"}
        else:
            out = {NVIDIA_VISIBLE_DEVICES: "all", CUDA_VISIBLE_DEVICES: mig}
    if share and mps:
        kind, _, amount = share.partition("=")
        if kind == "memory":
            out[MPS_MEMORY_LIMIT] = f"0={amount.removesuffix('Mi')}M"
        elif kind == "fraction":
            out[MPS_THREAD_PERCENTAGE] = str(max(1, round(float(amount) * 100)))
    return out


MPS_MEMORY_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
MPS_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
