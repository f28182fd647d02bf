"""The seed map on a StatefulSet's own metadata, said on the StatefulSet.

A gpu-scheduler pod without a map whose controller is a StatefulSet: its
StatefulSet is read once (by UID, for the manager's life; a bounded set) and, when
the map is on its own metadata and not its template's
(``internal.webhook.seedwarning.misplaced_map``), gets one ``MapNotOnTemplate``
Warning Event. The pod is placed as before (the default strategy); the Event only
says why it went there without ``CUDA_VISIBLE_DEVICES``. A StatefulSet that cannot
be read (gone, forbidden) is logged and not asked again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import structlog

from api.v1alpha1.keys import SCHEDULING_MAP_ANNOTATION
from internal.objects import JSON
from internal.scheduling.pods import controller_ref
from internal.webhook.seedwarning import MAP_NOT_ON_TEMPLATE, misplaced_map
from runtime.errors import ApiError
from runtime.events import EventRecorder

log = structlog.get_logger("podbinding.mapwarning")

#: StatefulSet UIDs remembered (the oldest forgotten first)
REMEMBERED = 4096


class MisplacedMaps:
    def __init__(self, client: Any, recorder: EventRecorder) -> None:
        self.client = client
        self.recorder = recorder
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, pod: JSON) -> None:
        """Called for an unbound pod this scheduler places; one GET per StatefulSet."""
        meta = pod.get("metadata") or {}
        if SCHEDULING_MAP_ANNOTATION in (meta.get("annotations") or {}):
            return
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "StatefulSet" or not ref.get("uid"):
            return
        with self._lock:
            if ref["uid"] in self._seen:
                return
            self._seen[ref["uid"]] = None
            if len(self._seen) > REMEMBERED:
                self._seen.popitem(last=False)
        ns = meta.get("namespace") or "default"
        try:
            sts = self.client.get("apps/v1", "StatefulSet", ref.get("name"), namespace=ns)
        except ApiError as exc:
            log.info("statefulset.unread", statefulset=f"{ns}/{ref.get('name')}",
                     code=exc.status, error=str(exc))
            return
        if (sts.get("metadata") or {}).get("uid") != ref["uid"]:
            return  # another StatefulSet of that name now
        why = misplaced_map(sts)
        if why is not None:
            log.warning("statefulset.map_not_on_template", statefulset=f"{ns}/{ref.get('name')}")
            self.recorder.warning({"apiVersion": "apps/v1", "kind": "StatefulSet", **sts},
                                  MAP_NOT_ON_TEMPLATE, why)
