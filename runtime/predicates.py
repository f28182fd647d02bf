"""Event predicates (port of controller-runtime's pkg/predicate).

A predicate decides per event whether the handler enqueues anything. Events are plain
objects; ``UpdateEvent`` carries ``old`` and ``new``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class CreateEvent:
    obj: JSON


@dataclass(frozen=True)
class UpdateEvent:
    old: JSON
    new: JSON


@dataclass(frozen=True)
class DeleteEvent:
    obj: JSON
    delete_state_unknown: bool = False


@dataclass(frozen=True)
class GenericEvent:
    obj: JSON


class Predicate:
    """All events pass by default; override what you filter."""

    def create(self, e: CreateEvent) -> bool:
        return True

    def update(self, e: UpdateEvent) -> bool:
        return True

    def delete(self, e: DeleteEvent) -> bool:
        return True

    def generic(self, e: GenericEvent) -> bool:
        return True


class Funcs(Predicate):
    """A predicate from functions; a missing function lets its events pass."""

    def __init__(
        self,
        create: Callable[[CreateEvent], bool] | None = None,
        update: Callable[[UpdateEvent], bool] | None = None,
        delete: Callable[[DeleteEvent], bool] | None = None,
        generic: Callable[[GenericEvent], bool] | None = None,
    ) -> None:
        self._c, self._u, self._d, self._g = create, update, delete, generic

    def create(self, e: CreateEvent) -> bool:
        return self._c(e) if self._c else True

    def update(self, e: UpdateEvent) -> bool:
        return self._u(e) if self._u else True

    def delete(self, e: DeleteEvent) -> bool:
        return self._d(e) if self._d else True

    def generic(self, e: GenericEvent) -> bool:
        return self._g(e) if self._g else True


def new_predicate(fn: Callable[[JSON], bool]) -> Predicate:
    """A predicate that applies ``fn`` to the object of every event (``new`` on updates)."""
    return Funcs(
        create=lambda e: fn(e.obj),
        update=lambda e: fn(e.new),
        delete=lambda e: fn(e.obj),
        generic=lambda e: fn(e.obj),
    )


def _md(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


class ResourceVersionChangedPredicate(Predicate):
    """Drops updates whose resourceVersion did not change (e.g. resyncs)."""

    def update(self, e: UpdateEvent) -> bool:
        return _md(e.old).get("resourceVersion") != _md(e.new).get("resourceVersion")


class GenerationChangedPredicate(Predicate):
    """Drops updates that did not change ``metadata.generation`` (status/metadata-only)."""

    def update(self, e: UpdateEvent) -> bool:
        return _md(e.old).get("generation") != _md(e.new).get("generation")


class LabelChangedPredicate(Predicate):
    def update(self, e: UpdateEvent) -> bool:
        return (_md(e.old).get("labels") or {}) != (_md(e.new).get("labels") or {})


class AnnotationChangedPredicate(Predicate):
    def update(self, e: UpdateEvent) -> bool:
        return (_md(e.old).get("annotations") or {}) != (_md(e.new).get("annotations") or {})


class _And(Predicate):
    def __init__(self, ps: tuple[Predicate, ...]) -> None:
        self.ps = ps

    def create(self, e: CreateEvent) -> bool:
        return all(p.create(e) for p in self.ps)

    def update(self, e: UpdateEvent) -> bool:
        return all(p.update(e) for p in self.ps)

    def delete(self, e: DeleteEvent) -> bool:
        return all(p.delete(e) for p in self.ps)

    def generic(self, e: GenericEvent) -> bool:
        return all(p.generic(e) for p in self.ps)


class _Or(_And):
    def create(self, e: CreateEvent) -> bool:
        return any(p.create(e) for p in self.ps)

    def update(self, e: UpdateEvent) -> bool:
        return any(p.update(e) for p in self.ps)

    def delete(self, e: DeleteEvent) -> bool:
        return any(p.delete(e) for p in self.ps)

    def generic(self, e: GenericEvent) -> bool:
        return any(p.generic(e) for p in self.ps)


class _Not(Predicate):
    def __init__(self, p: Predicate) -> None:
        self.p = p

    def create(self, e: CreateEvent) -> bool:
        return not self.p.create(e)

    def update(self, e: UpdateEvent) -> bool:
        return not self.p.update(e)

    def delete(self, e: DeleteEvent) -> bool:
        return not self.p.delete(e)

    def generic(self, e: GenericEvent) -> bool:
        return not self.p.generic(e)


def and_(*ps: Predicate) -> Predicate:
    return _And(ps)


def or_(*ps: Predicate) -> Predicate:
    return _Or(ps)


def not_(p: Predicate) -> Predicate:
    return _Not(p)
