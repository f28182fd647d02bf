"""Event handlers that turn informer events into reconcile requests (controller-runtime's
pkg/handler): the object itself, its controlling owner, or a mapping function."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from runtime.client import split_api_version
from runtime.informer import EventHandler
from runtime.predicates import CreateEvent, DeleteEvent, Predicate, UpdateEvent
from runtime.store import DeletedFinalStateUnknown

JSON = dict[str, Any]


class Request(NamedTuple):
    """What a reconciler is asked to reconcile: ``namespace`` ("" if cluster-scoped), ``name``."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def for_object(cls, obj: JSON) -> Request:
        md = obj.get("metadata") or {}
        return cls(md.get("namespace") or "", md["name"])


MapFunc = Callable[[JSON], Iterable[Request]]


def enqueue_object(obj: JSON) -> list[Request]:
    return [Request.for_object(obj)]


def enqueue_owner(owner_api_version: str, owner_kind: str, only_controller: bool = True) -> MapFunc:
    """Map a child to the owner of kind ``owner_kind`` in its ``ownerReferences``."""
    group, _ = split_api_version(owner_api_version)

    def fn(obj: JSON) -> list[Request]:
        md = obj.get("metadata") or {}
        out = []
        for ref in md.get("ownerReferences") or []:
            if (
                ref.get("kind") != owner_kind
                or split_api_version(ref.get("apiVersion", ""))[0] != group
            ):
                continue
            if only_controller and not ref.get("controller"):
                continue
            out.append(Request(md.get("namespace") or "", ref["name"]))
        return out

    return fn


class EnqueueHandler(EventHandler):
    """Informer handler: filter through predicates, map to requests, add to the queue.
    Inline (runtime/informer.py): a map function and predicates read the object only,
    and an add to the queue never waits."""

    inline = True

    def __init__(self, queue: Any, map_func: MapFunc, predicates: Iterable[Predicate] = ()) -> None:
        self.queue = queue
        self.map_func = map_func
        self.predicates = list(predicates)

    def _enqueue(self, obj: JSON) -> None:
        for req in self.map_func(obj):
            self.queue.add(req)

    def on_add(self, obj: JSON) -> None:
        e = CreateEvent(obj)
        if all(p.create(e) for p in self.predicates):
            self._enqueue(obj)

    def on_update(self, old: JSON, new: JSON) -> None:
        e = UpdateEvent(old, new)
        if all(p.update(e) for p in self.predicates):
            # an owner change must wake both the old and the new owner
            seen = set()
            for obj in (old, new):
                for req in self.map_func(obj):
                    if req not in seen:
                        seen.add(req)
                        self.queue.add(req)

    def on_delete(self, obj: JSON | DeletedFinalStateUnknown) -> None:
        unknown = isinstance(obj, DeletedFinalStateUnknown)
        real = obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj
        e = DeleteEvent(real, unknown)
        if all(p.delete(e) for p in self.predicates):
            self._enqueue(real)
