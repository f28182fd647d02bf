"""``Later``: a part of the manager made after a part that needs it.

The composition root (``controllers/setup.py``) makes every shared part once, in
dependency order, and hands it to what uses it when that is made. Where two parts
need each other the cycle is real, and one side gets a ``Later`` instead of the
part; the place that makes it names the cycle in a comment. Guarantees:

- ``set`` once: a second ``set`` raises (two parts would answer for one).
- ``get()`` before ``set`` raises, naming what was missing: a part used before the
  root finished wiring is a wiring bug, never a silent None.
- ``peek()`` is None before ``set``, for the callers that may run early and have
  nothing to do then (an informer's event before its controller exists).
"""

from __future__ import annotations

from typing import Generic, TypeVar, cast

T = TypeVar("T")
_UNSET = object()


class Later(Generic[T]):
    def __init__(self, what: str) -> None:
        self.what = what
        self._value: object = _UNSET

    def set(self, value: T) -> T:
        if self._value is not _UNSET:
            raise RuntimeError(f"{self.what} was already set")
        self._value = value
        return value

    @property
    def is_set(self) -> bool:
        return self._value is not _UNSET

    def get(self) -> T:
        if self._value is _UNSET:
            raise RuntimeError(f"{self.what} is used before it was made")
        return cast(T, self._value)

    def peek(self) -> T | None:
        return None if self._value is _UNSET else cast(T, self._value)
