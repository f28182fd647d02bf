"""How the status writer's writes reach the API server: a status set only on the
object of one UID, and our finalizer added to one version of an object.

- ``patch_status``: a JSON patch whose first operation tests ``/metadata/uid``, so
  it never lands on another object of the same name (deleted and created again
  since the status was built); it sets the whole status the reconcile built.
  A ``metadata.uid`` in a merge patch is no precondition here: the API server
  resets the metadata of a status-subresource update to the stored object's.
- ``add_finalizer``: a merge patch with the object's resourceVersion, never to an
  object being deleted; on a first Conflict the object is read afresh and the add
  tried once more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.v1alpha1.keys import CHILDREN_FINALIZER
from api.v1alpha1.types import API_VERSION
from controllers.status.builder import add_finalizer_patch
from internal.objects import JSON, resource_version
from runtime import Conflict, Invalid, NotFound


def without_nulls(value: Any) -> Any:
    """``value`` without the members a merge patch would delete (None)."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [without_nulls(v) for v in value]
    return value


def patch_status(client: Any, namespace: str, name: str, uid: str,
                 status: Mapping[str, Any]) -> JSON | None:
    """Sets ``status`` on GPUWorkload ``namespace/name`` if its UID is ``uid``.
    Returns the object as written; None when the object of that name is another
    one. Raises NotFound when there is none, and what the API server raises else
    (an invalid status included)."""
    if not uid:
        return client.patch(API_VERSION, "GPUWorkload", name, {"status": dict(status)},
                            namespace=namespace, patch_type="merge", subresource="status")
    ops = [{"op": "test", "path": "/metadata/uid", "value": uid},
           {"op": "add", "path": "/status", "value": without_nulls(status)}]
    try:
        return client.patch(API_VERSION, "GPUWorkload", name, ops, namespace=namespace,
                            patch_type="json", subresource="status")
    except Invalid:
        # the UID test failed (422, as any failed test), or the status is invalid
        current = client.get(API_VERSION, "GPUWorkload", name, namespace=namespace)
        if (current.get("metadata") or {}).get("uid") != uid:
            return None
        raise


def add_finalizer(client: Any, obj: JSON, *, retry: bool = True,
                  landed: list[int] | None = None) -> bool:
    """Adds our finalizer to ``obj`` unless it is there or the object is being
    deleted. True: done (or the object is gone, or another one now); False: try
    again (a conflict with a newer copy). ``landed`` gets the resourceVersion our
    patch landed at, when it was sent."""
    meta = obj["metadata"]
    if CHILDREN_FINALIZER in (meta.get("finalizers") or ()) or meta.get("deletionTimestamp"):
        return True
    try:
        written = client.patch(API_VERSION, "GPUWorkload", meta["name"],
                               add_finalizer_patch(meta, CHILDREN_FINALIZER),
                               namespace=meta["namespace"], patch_type="merge")
    except NotFound:
        return True
    except Conflict:
        if not retry:
            return False
        try:
            fresh = client.get(API_VERSION, "GPUWorkload", meta["name"],
                               namespace=meta["namespace"])
        except NotFound:
            return True
        if fresh["metadata"].get("uid") != meta["uid"]:
            return True
        return add_finalizer(client, fresh, retry=False, landed=landed)
    if landed is not None and isinstance(written, dict):
        landed.append(resource_version(written))
    return True
