"""The typed GPUWorkload of a cached object, validated once per version.

A reconcile reads the workload as a pydantic model; validating the whole object
(spec, template, status) on every reconcile of every unit was a measurable share of
the controller's CPU per unit (bench/profile.md). A workload is reconciled several
times per version (its create, each pod event, the status writer's view), and the
informer's cache hands out the same frozen object for one version each time.

Guarantees:

- **Same object, same model.** A model is reused only for the same UID and
  resourceVersion *and* the very same ``metadata``, ``spec`` and ``status`` objects
  (identity, held alive by the entry, so an id is never reused): a read-your-writes
  view (``OwnWrites.view``: the cached object with the status we last asked for)
  is another status object and gets its own model.
- **Prepared once.** ``prepare`` (the reconciler's defaults: strategy, exposure) is
  applied when the model is made; readers treat the model as read-only. What
  ``prepare`` depends on is part of the key (``variant``): a model prepared with
  other defaults is not reused.
- **Invalid is not cached**: ``ValidationError`` is raised each time (rare, and the
  reconcile reports it).
- **Small**: one model per workload (its latest), at most ``size`` workloads, the
  least recently used dropped first (a model is ~6.5 KB: the cache must not make
  the controller's memory grow with the cluster; the reuse it is for happens
  within a second of a version's arrival).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from api.v1alpha1.types import GPUWorkload
from internal.objects import JSON


class WorkloadModels:
    def __init__(self, prepare: Callable[[GPUWorkload], None] = lambda w: None, *,
                 size: int = 512) -> None:
        self.prepare = prepare
        self.size = size
        self._lock = threading.Lock()
        #: UID -> (resourceVersion, variant, metadata, spec, status, model)
        self._entries: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
        self.hits = self.misses = 0

    def model(self, raw: JSON, variant: Any = None) -> GPUWorkload:
        """The model of ``raw``, prepared (``variant``: what ``prepare`` reads, a
        hashable); raises pydantic's ValidationError."""
        meta = raw.get("metadata") or {}
        uid, rv = meta.get("uid") or "", meta.get("resourceVersion") or ""
        parts = (rv, variant, raw.get("metadata"), raw.get("spec"), raw.get("status"))
        with self._lock:
            entry = self._entries.get(uid)
            if entry is not None and entry[0] == rv and entry[1] == variant and \
                    all(a is b for a, b in zip(entry[2:5], parts[2:], strict=True)):
                self._entries.move_to_end(uid)
                self.hits += 1
                return entry[5]
        w = GPUWorkload.model_validate(raw)
        self.prepare(w)
        if uid and rv:  # an object from the API: versioned
            with self._lock:
                self.misses += 1
                self._entries[uid] = (*parts, w)
                self._entries.move_to_end(uid)
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
        return w
