"""The local control plane for tests, the demo and the benchmark (see controlplane.py)."""

from .controlplane import ControlPlane, StartError, signals_stop

__all__ = ["ControlPlane", "StartError", "signals_stop"]
