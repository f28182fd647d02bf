"""Placement strategies, one file each, registered by name (see base.py)."""

from internal.scheduling.strategies.base import Strategy, create, names, register

__all__ = ["Strategy", "create", "names", "register"]
