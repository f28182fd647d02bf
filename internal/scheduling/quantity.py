"""The one parser of Kubernetes quantities for GPU counts."""

from __future__ import annotations

from typing import Any

from kubernetes.utils import parse_quantity


def gpu_count(value: Any) -> int:
    """``"4"`` -> 4. A count of whole devices: fractions round down, anything that is
    not a quantity (or is negative) is 0, never an exception."""
    if value is None:
        return 0
    try:
        return max(0, int(parse_quantity(value)))
    except (ValueError, TypeError, ArithmeticError):
        return 0
