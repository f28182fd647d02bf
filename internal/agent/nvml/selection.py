"""Choosing a backend from a flag value."""

from __future__ import annotations

from internal.agent.nvml.backend import NvmlBackend
from internal.agent.nvml.fixture import FixtureBackend
from internal.agent.nvml.real import NvmlUnavailable, RealNvmlBackend


def select_backend(spec: str | None = "auto") -> NvmlBackend:
    """``"nvml"``: pynvml, or :class:`NvmlUnavailable`. ``"fixture:<name-or-path>"``: a
    recorded fixture (``fixture:h100-sxm-8`` or ``fixture:/path/node.json``).
    ``"auto"`` (or None/empty): pynvml when the library loads, else
    :class:`NvmlUnavailable` (an agent never invents GPUs)."""
    spec = (spec or "auto").strip()
    if spec.startswith("fixture:"):
        return FixtureBackend.load(spec.removeprefix("fixture:"))
    if spec in ("auto", "nvml"):
        return RealNvmlBackend()
    raise ValueError(f"unknown NVML backend {spec!r}: want auto, nvml or fixture:<name|path>")


__all__ = ["NvmlUnavailable", "select_backend"]
