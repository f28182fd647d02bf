"""The typed GPUWorkload of a cached object: its spec validated once per generation.

A reconcile reads the workload as a pydantic model; validating the whole object
(spec, template, status) on every reconcile of every unit was a measurable share of
the controller's CPU per unit (bench/profile.md). Almost every reconcile sees a new
version of its workload (its create, the status we asked for in the writer's view,
that status written back, an edit), but a status write changes neither the spec nor
``metadata.generation``: so the model is put together from parts, each validated
only when it changed.

Guarantees:

- **Same object, same model.** The same UID and resourceVersion with the very same
  ``metadata``, ``spec`` and ``status`` objects (identity, held alive by the entry,
  so an id is never reused) give the same model.
- **The spec once per generation.** A new version of the same workload (same
  namespace/name *and* UID) reuses the previous version's spec model when its
  ``metadata.generation`` is the same and its spec is equal to the one that model
  was made from (the API server raises the generation with every spec change; the
  equality, about 0.5 µs, is the check that keeps a writer that does not from being
  served a stale spec). Its status model is reused when the status is equal (the
  status we asked for, then the same status written back), its metadata when it is
  the very same object (a read-your-writes view of ``OwnWrites``). A new UID under
  the same name (deleted and re-created) is validated whole.
- **Prepared once.** ``prepare`` (the reconciler's defaults: strategy, exposure)
  sets defaults on the *spec* only, when the spec model is made; a reused spec is
  not prepared again. What ``prepare`` depends on is part of the key (``variant``):
  a spec prepared with other defaults is not reused.
- **Read-only.** Models and their parts are shared between reconciles of the same
  workload (one at a time: the work queue never hands a key to two workers): no
  reader changes one (``tests/unit/controllers/gpuworkload/test_workload_models.py`` checks
  that a reconcile leaves them as they were made).
- **Invalid is not cached**: ``ValidationError`` is raised each time (rare, and the
  reconcile reports it).
- **Small**: one entry per workload (its latest version), dropped when the workload
  is gone (``forget``, from the reconcile that finds it deleted), and at most
  ``size`` workloads, the least recently used dropped first (a model is ~6.5 KB: the
  cache must not make the controller's memory grow with the cluster).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from api.v1alpha1.types import GPUWorkload, GPUWorkloadSpec
from internal.objects import JSON


@dataclass(slots=True)
class _Entry:
    """A workload's latest model and the parts of the object it was made from
    (replaced whole, never changed: not frozen, which costs 1 µs a version)."""

    uid: str
    rv: str
    generation: Any
    variant: Any
    metadata: Any
    spec: Any
    status: Any
    model: GPUWorkload


class WorkloadModels:
    def __init__(self, prepare: Callable[[GPUWorkloadSpec], None] = lambda s: None, *,
                 size: int = 512) -> None:
        self.prepare = prepare
        self.size = size
        self._lock = threading.Lock()
        #: namespace/name -> the entry of its latest version
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        #: whole model reused / spec reused / validated whole
        self.hits = self.spec_hits = self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def model(self, raw: JSON, variant: Any = None) -> GPUWorkload:
        """The model of ``raw``, its spec prepared (``variant``: what ``prepare``
        reads, a hashable); raises pydantic's ValidationError."""
        meta = raw.get("metadata") or {}
        uid, rv = meta.get("uid") or "", meta.get("resourceVersion") or ""
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        metadata, spec, status = raw.get("metadata"), raw.get("spec"), raw.get("status")
        generation = meta.get("generation")
        with self._lock:
            e = self._entries.get(key)
            if e is not None and (not uid or e.uid != uid):
                e = None
            if e is not None and e.rv == rv and e.variant == variant and \
                    e.metadata is metadata and e.spec is spec and e.status is status:
                self._entries.move_to_end(key)
                self.hits += 1
                return e.model
        w = self._reuse(e, raw, variant, generation) if e is not None else None
        if w is None:
            w = GPUWorkload.model_validate(raw)
            self.prepare(w.spec)
        if uid and rv:  # an object from the API: versioned
            with self._lock:
                if w.spec is (e.model.spec if e is not None else None):
                    self.spec_hits += 1
                else:
                    self.misses += 1
                self._entries[key] = _Entry(uid, rv, generation, variant, metadata, spec,
                                            status, w)
                self._entries.move_to_end(key)
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
        return w

    def forget(self, key: str) -> None:
        """``namespace/name`` is gone: its entry goes with it."""
        with self._lock:
            self._entries.pop(key, None)

    @staticmethod
    def _reuse(e: _Entry, raw: JSON, variant: Any, generation: Any) -> GPUWorkload | None:
        """A new version of ``e``'s workload from ``e``'s parts where they still hold;
        None when the spec must be validated again (then the whole is)."""
        spec = raw.get("spec")
        if e.variant != variant or e.generation != generation or \
                not (spec is e.spec or spec == e.spec):
            return None
        parts = dict(raw)
        parts["spec"] = e.model.spec  # an instance: pydantic keeps it as it is
        status = raw.get("status")
        if status is e.status or (status is not None and status == e.status):
            parts["status"] = e.model.status
        if raw.get("metadata") is e.metadata:
            parts["metadata"] = e.model.metadata
        return GPUWorkload.model_validate(parts)
