"""NVML access behind one small interface, :class:`NvmlBackend`, with two backends:
:class:`RealNvmlBackend` (pynvml, on GPU machines) and :class:`FixtureBackend`
(recorded JSON, for tests and demos). :func:`sample` turns a backend's readings into
the published :class:`NodeSample` (health and NVLink peers derived)."""

from internal.agent.nvml.backend import NvmlBackend, sample
from internal.agent.nvml.fixture import FixtureBackend, available_fixtures
from internal.agent.nvml.real import NvmlUnavailable, RealNvmlBackend
from internal.agent.nvml.selection import select_backend
from internal.agent.nvml.types import DeviceState, NodeSample, NvLink, RawDevice, RemoteType

__all__ = [
    "DeviceState",
    "FixtureBackend",
    "NodeSample",
    "NvLink",
    "NvmlBackend",
    "NvmlUnavailable",
    "RawDevice",
    "RealNvmlBackend",
    "RemoteType",
    "available_fixtures",
    "sample",
    "select_backend",
]
