"""The replica index of a pod: the ``apps.kubernetes.io/pod-index`` label, else the
ordinal at the end of its name (StatefulSet pods are named ``<set>-<ordinal>``).

The StatefulSet controller sets both the name and (Kubernetes 1.28+) the label
before it creates a pod, so both are visible at admission. A pod created with only
``generateName`` has no name yet at CREATE (the API server fills it in after the
mutating webhooks ran); without the label its index is unknown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
#: at most 9 ASCII digits: ``\d`` and ``isdigit`` take ``²`` and other digits that
#: ``int`` refuses, and an index beyond that is no replica's
_ORDINAL = re.compile(r"-(0|[1-9][0-9]{0,8})$", re.ASCII)
_INDEX = re.compile(r"(0|[1-9][0-9]{0,8})", re.ASCII)


def pod_index(pod: Mapping[str, Any], request_name: str = "") -> tuple[int | None, str]:
    """``(index, source)``; ``index`` is None when it cannot be told, and ``source``
    then says why (for a warning)."""
    md = pod.get("metadata") or {}
    label = (md.get("labels") or {}).get(POD_INDEX_LABEL)
    if label is not None:
        if _INDEX.fullmatch(str(label)):
            return int(label), f"label {POD_INDEX_LABEL}"
        return None, (f"label {POD_INDEX_LABEL}={str(label)[:80]!r} is not a non-negative "
                      "integer below 1000000000")
    name = md.get("name") or request_name or ""
    if not name:
        gen = md.get("generateName") or ""
        return None, (
            f"pod has no name yet (generateName {gen!r}) and no {POD_INDEX_LABEL} label"
        )
    m = _ORDINAL.search(name)
    if m is None:
        return None, f"pod name {name!r} has no ordinal suffix and no {POD_INDEX_LABEL} label"
    return int(m.group(1)), f"ordinal of pod name {name!r}"
