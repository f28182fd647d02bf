"""An informer's cache for the queue tests: an ``Indexer`` whose writes are handed
to its event handlers at once (as an informer's inline handlers see them), and which
counts what reads it whole (``list``), to show that the gate never does."""

from __future__ import annotations

from typing import Any

from runtime.informer import EventHandler
from runtime.store import Indexer


class EventedIndexer(Indexer):
    """``add`` (an upsert), ``update`` and ``delete`` tell every handler; a handler
    registered late gets an add for each object held, as an informer's does."""

    def __init__(self) -> None:
        super().__init__()
        self.handlers: list[EventHandler] = []
        self.lists = 0  # list() calls

    def add_event_handler(self, handler: EventHandler) -> Any:
        for obj in super().list():
            handler.on_add(obj)
        self.handlers.append(handler)
        return handler

    def add(self, obj: Any) -> Any:
        old = self.get(obj)
        new = super().add(obj)
        for h in self.handlers:
            if old is None:
                h.on_add(new)
            else:
                h.on_update(old, new)
        return new

    update = add

    def delete(self, obj_or_key: Any) -> Any:
        old = super().delete(obj_or_key)
        if old is not None:
            for h in self.handlers:
                h.on_delete(old)
        return old

    def list(self) -> list[Any]:
        self.lists += 1
        return super().list()
