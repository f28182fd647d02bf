"""The words every layer above ``runtime/`` uses for an API object read as JSON:
the ``JSON`` alias, its ``namespace/name`` key and its resourceVersion as a number.

One definition of each, so that a key written by one module is the key another
looks up (``runtime/`` keeps its own: it imports no domain code).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: an API object (or part of one) as the client returns it, read-only
JSON = Mapping[str, Any]


def object_key(obj: JSON) -> str:
    """``namespace/name`` of a namespaced object (namespace ``default`` when it has
    none): the key of the work queues, the caches' lookups and the ledger's
    bookings."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def resource_version(obj: JSON) -> int:
    """etcd's resourceVersions are increasing integers (opaque by contract, but
    kube-apiserver's are revisions); 0 when unknown or unreadable."""
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0
