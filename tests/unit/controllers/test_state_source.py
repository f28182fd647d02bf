"""The manager's one placement state (``PlacementStateSource``): built once for all
its callers, built again after it was invalidated, with every pod book registered
before."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from api.v1alpha1.types import DeviceExposure
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState


class Book:
    def owns(self, pod: Any) -> bool:
        return False

    def owns_key(self, key: str) -> bool:
        return False

    def rebuild(self, ledger: Any, pods: list[Any]) -> list[str]:
        return []

    def wake(self) -> None:
        pass

    def evict(self, ledger_key: str, message: str) -> None:
        pass


def test_callers_share_one_state_until_it_is_invalidated() -> None:
    built: list[PlacementState] = []

    def build(books: tuple[Any, ...]) -> PlacementState:
        state = PlacementState(DeviceExposure.CUDA_VISIBLE_DEVICES, pod_books=books)
        built.append(state)
        return state

    states = PlacementStateSource(build, lambda s: s.rebuild(lambda: ([], [], [], [])))
    book = Book()
    states.add_pod_book(book)
    assert states.current is None and states.if_ready() is None
    got: list[PlacementState] = []
    threads = [threading.Thread(target=lambda: got.append(states.get())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and all(s is built[0] for s in got)
    assert built[0].ready and built[0].pod_books == (book,)
    built[0].invalidate("a handler raised")
    assert states.if_ready() is None
    assert states.get() is built[1] and built[1].ready and built[1].pod_books == (book,)


def test_a_pod_book_registered_after_the_state_was_built_is_refused() -> None:
    states = PlacementStateSource(lambda books: PlacementState(
        DeviceExposure.CUDA_VISIBLE_DEVICES, pod_books=books))
    states.get()
    with pytest.raises(RuntimeError):
        states.add_pod_book(Book())
