"""The one parser of Kubernetes quantities for GPU counts."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any


def _kubernetes_parse_quantity() -> Any:
    """``kubernetes.utils.parse_quantity``, loaded from its own file: importing
    ``kubernetes.utils`` runs the package's ``__init__``, which imports every generated
    API model (~30 MiB of the controller's RSS) for one 50-line function."""
    spec = importlib.util.find_spec("kubernetes")  # locates, does not import
    if spec is None or not spec.submodule_search_locations:
        from kubernetes.utils import parse_quantity
        return parse_quantity
    path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "quantity.py"
    qspec = importlib.util.spec_from_file_location("_kubernetes_utils_quantity", path)
    if qspec is None or qspec.loader is None:
        from kubernetes.utils import parse_quantity
        return parse_quantity
    module = importlib.util.module_from_spec(qspec)
    qspec.loader.exec_module(module)
    return module.parse_quantity


parse_quantity = _kubernetes_parse_quantity()


def gpu_count(value: Any) -> int:
    """``"4"`` -> 4. A count of whole devices: fractions round down, anything that is
    not a quantity (or is negative) is 0, never an exception."""
    if value is None:
        return 0
    try:
        return max(0, int(parse_quantity(value)))
    except (ValueError, TypeError, ArithmeticError):
        return 0


def memory_mib(value: Any) -> int | None:
    """``"20Gi"`` -> 20480: a memory quantity in whole MiB (rounded up: a share is
    never booked smaller than asked); None when it is not a quantity or is negative."""
    if value is None:
        return None
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        return None
    if q < 0:
        return None
    return math.ceil(q / (1024 * 1024))
