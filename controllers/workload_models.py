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
  view (``StatusWriter.view``: the cached object with the status we last asked for)
  is another status object and gets its own model.
- **Prepared once.** ``prepare`` (the reconciler's defaults: strategy, exposure) is
  applied when the model is made; readers treat the model as read-only. What
  ``prepare`` depends on is part of the key (``variant``): a model prepared with
  other defaults is not reused.
- **Invalid is not cached**: ``ValidationError`` is raised each time (rare, and the
  reconcile reports it).
- **Bounded**: at most ``size`` entries, least recently used dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from api.v1alpha1.types import GPUWorkload
from internal.objects import JSON

_Key = tuple[str, str, Any]


class WorkloadModels:
    def __init__(self, prepare: Callable[[GPUWorkload], None] = lambda w: None, *,
                 size: int = 4096) -> None:
        self.prepare = prepare
        self.size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[_Key, tuple[Any, Any, Any, GPUWorkload]] = OrderedDict()
        self.hits = self.misses = 0

    def model(self, raw: JSON, variant: Any = None) -> GPUWorkload:
        """The model of ``raw``, prepared (``variant``: what ``prepare`` reads, a
        hashable); raises pydantic's ValidationError."""
        meta = raw.get("metadata") or {}
        key = (meta.get("uid") or "", meta.get("resourceVersion") or "", variant)
        parts = (raw.get("metadata"), raw.get("spec"), raw.get("status"))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and all(a is b for a, b in zip(entry[:3], parts, strict=True)):
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[3]
        w = GPUWorkload.model_validate(raw)
        self.prepare(w)
        if key[0] and key[1]:  # an object from the API: versioned
            with self._lock:
                self.misses += 1
                self._entries[key] = (*parts, w)
                self._entries.move_to_end(key)
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
        return w
