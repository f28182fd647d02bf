"""The GPUWorkload reconciler's options (the manager's flags that reach it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from api.v1alpha1.types import DeviceExposure, GPUWorkload
from internal.objects import JSON


@dataclass
class Options:
    default_exposure: DeviceExposure = DeviceExposure.CUDA_VISIBLE_DEVICES
    default_strategy: str | None = None  # used when a spec names none (else leastLoaded)
    #: before placing a spec, why the API server would refuse its children (None:
    #: it would not); controllers/gpuworkload/template_check.py. None: not checked
    check_children: Callable[[GPUWorkload, JSON], str | None] | None = None
