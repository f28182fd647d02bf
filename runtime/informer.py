"""Shared index informers (port of client-go's SharedIndexInformer and SharedInformerFactory).

An informer runs a :class:`~runtime.reflector.Reflector` into an :class:`~runtime.store.Indexer`
and fans each change out to its handlers. A handler has its own thread and unbounded
buffer (client-go's processorListener), so a slow handler never stalls the watch or the
other handlers, unless it says it is ``inline``: a handler that only updates memory (a
work queue, a cache) and waits on nothing but a short lock is called on the thread that
delivers the event, right after the store is updated. In Python a thread per handler
costs a thread switch per event and handler (the interpreter lock changes hands each
time); measured in the benchmark's burst, the controller's hot handlers inline halved its
voluntary context switches (bench/profile.md, "Handlers on the watch's thread"). Each
handler sees one object's changes in order either way.

Handlers receive frozen (read-only) objects. Deletes missed while the watch was down are
delivered as :class:`~runtime.store.DeletedFinalStateUnknown` tombstones after a relist.

A handler that raises loses that event, so it is never silent: the exception is logged
with the informer, the handler, the operation and the object's key, counted in
``informer_handler_errors_total{informer,handler}``, and handed to the handler's
``on_error(op, obj, exc)`` (a ``FuncHandler``'s ``on_error=``), where its owner can
rebuild whatever the lost event should have kept current. The next events are delivered
as usual.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from runtime import metrics
from runtime.client import Client
from runtime.reflector import Reflector
from runtime.store import DeletedFinalStateUnknown, Indexer, IndexFunc, freeze, meta_namespace_key

log = structlog.get_logger("runtime.informer")

JSON = dict[str, Any]


def strip_managed_fields(obj: JSON) -> JSON:
    """The default informer transform: drop ``metadata.managedFields`` (server-side apply
    bookkeeping, about half of a cached pod, never read by a controller). Objects fresh
    from the wire are ours to change, so this edits in place."""
    md = obj.get("metadata")
    if isinstance(md, dict):
        md.pop("managedFields", None)
    return obj


#: what a handler's owner is told when one of its calls raised: (op, object, exception),
#: op one of add, update, delete; the object is the new one (a tombstone for a delete)
ErrorHook = Callable[[str, Any, BaseException], None]


class EventHandler:
    """Override any of these; each is called from the handler's own thread, or, if
    ``inline``, from the thread that delivers the event (the reflector's), with the
    informer's lock held: an inline handler must not do I/O, wait, or register
    handlers. ``name`` labels its errors (default: the class name)."""

    name = ""
    inline = False

    def on_add(self, obj: JSON) -> None:
        pass

    def on_update(self, old: JSON, new: JSON) -> None:
        pass

    def on_delete(self, obj: JSON | DeletedFinalStateUnknown) -> None:
        pass

    def on_error(self, op: str, obj: Any, exc: BaseException) -> None:
        """One of the calls above raised ``exc`` for ``obj``; that event is lost."""


class FuncHandler(EventHandler):
    def __init__(
        self,
        on_add: Callable[[JSON], None] | None = None,
        on_update: Callable[[JSON, JSON], None] | None = None,
        on_delete: Callable[[Any], None] | None = None,
        *,
        name: str = "",
        on_error: ErrorHook | None = None,
        inline: bool = False,
    ) -> None:
        self._a, self._u, self._d = on_add, on_update, on_delete
        self.name = name
        self._e = on_error
        self.inline = inline

    def on_error(self, op: str, obj: Any, exc: BaseException) -> None:
        if self._e:
            self._e(op, obj, exc)

    def on_add(self, obj: JSON) -> None:
        if self._a:
            self._a(obj)

    def on_update(self, old: JSON, new: JSON) -> None:
        if self._u:
            self._u(old, new)

    def on_delete(self, obj: Any) -> None:
        if self._d:
            self._d(obj)


_SYNCED = object()


class HandlerRegistration:
    """One handler's buffer and thread (none for an inline handler: each event is
    delivered as it is pushed). ``has_synced()``: it has seen the initial list."""

    def __init__(self, handler: EventHandler, name: str) -> None:
        self.handler = handler
        self.informer = name
        self.name = handler.name or type(handler).__name__
        self._buf: deque[tuple[Any, ...]] = deque()
        self._cond = threading.Condition()
        self._stopped = False
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        if not handler.inline:
            self._thread = threading.Thread(target=self._run, name=f"handler-{name}",
                                            daemon=True)
            self._thread.start()

    def push(self, *n: Any) -> None:
        if self._thread is None:
            if not self._stopped:
                self._deliver(n)
            return
        with self._cond:
            self._buf.append(n)
            if len(self._buf) == 1:
                # the one consumer waits only on an empty buffer: a push onto a
                # non-empty one has nobody to wake (``Condition.notify`` was 6% of
                # the controller's busy samples in a burst, bench/profile.md)
                self._cond.notify()

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    def pending(self) -> int:
        with self._cond:
            return len(self._buf)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._buf and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                n = self._buf.popleft()
            self._deliver(n)

    def _deliver(self, n: tuple[Any, ...]) -> None:
        op = n[0]
        if op is _SYNCED:
            self._synced.set()
            return
        try:
            if op == "add":
                self.handler.on_add(n[1])
            elif op == "update":
                self.handler.on_update(n[1], n[2])
            else:
                self.handler.on_delete(n[1])
        except Exception as exc:
            self._failed(op, n[-1], exc)

    def _failed(self, op: str, obj: Any, exc: BaseException) -> None:
        """Logs, counts and hands over a handler's exception (the event is lost)."""
        key = _key_of(obj)
        metrics.informer_handler_errors_total.labels(self.informer, self.name).inc()
        log.error("informer.handler_error", informer=self.informer, handler=self.name,
                  op=op, object=key, exc_info=exc)
        try:
            self.handler.on_error(op, obj, exc)
        except Exception:
            log.exception("informer.handler_error_hook_failed", informer=self.informer,
                          handler=self.name, op=op, object=key)


def _key_of(obj: Any) -> str:
    try:
        return meta_namespace_key(obj)
    except Exception:  # not an object with metadata: say what it is
        return repr(obj)[:200]


class SharedIndexInformer:
    def __init__(
        self,
        client: Client,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        resync_period: float = 0.0,
        indexers: dict[str, IndexFunc] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout: tuple[float, float] = (300.0, 600.0),
        page_size: int = 500,
        transform: Callable[[JSON], JSON] | None = None,
    ) -> None:
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self.name = f"{api_version}/{kind}" + (f"@{namespace}" if namespace else "")
        self.indexer = Indexer(indexers)
        self.resync_period = resync_period
        self.transform = transform
        #: the kind's own transform a factory added (``SharedInformerFactory.informer_for``)
        self.kind_transform: Callable[[JSON], JSON] | None = None
        self.reflector = Reflector(
            client,
            api_version,
            kind,
            self,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            page_size=page_size,
            watch_timeout=watch_timeout,
            name=self.name,
        )
        self._lock = threading.RLock()
        self._handlers: list[HandlerRegistration] = []
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = False

    # ---------------------------------------------------------------- handlers
    def add_event_handler(self, handler: EventHandler) -> HandlerRegistration:
        """Register a handler; if the informer has data already, it gets adds for all of it."""
        reg = HandlerRegistration(handler, self.name)
        with self._lock:
            if self._synced.is_set():
                for obj in self.indexer.list():
                    reg.push("add", obj)
                reg.push(_SYNCED)
            self._handlers.append(reg)
        return reg

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        self.indexer.add_indexers(indexers)

    def _notify(self, *n: Any) -> None:
        for h in self._handlers:
            h.push(*n)

    # ---------------------------------------------------------------- reflector sink
    def _prepare(self, obj: JSON) -> JSON:
        if self.transform is not None:
            obj = self.transform(obj)
        return freeze(obj)

    def replace(self, items: list[JSON], resource_version: str) -> None:
        new = [self._prepare(o) for o in items]
        with self._lock:
            new_keys = {meta_namespace_key(o) for o in new}
            for key in self.indexer.list_keys():
                if key not in new_keys:
                    old = self.indexer.delete(key)
                    if old is not None:
                        self._notify("delete", DeletedFinalStateUnknown(key, old))
            for obj in new:
                self._upsert(obj)
            if not self._synced.is_set():
                self._synced.set()
                self._notify(_SYNCED)

    def watch_event(self, event_type: str, obj: JSON) -> None:
        obj = self._prepare(obj)
        with self._lock:
            if event_type == "DELETED":
                self.indexer.delete(obj)
                self._notify("delete", obj)
                return
            self._upsert(obj)

    def _upsert(self, obj: JSON) -> None:
        """Store ``obj`` and tell the handlers: an add, or an update of what was there.
        (Called with the lock held.)"""
        old = self.indexer.get(obj)
        self.indexer.add(obj)
        if old is None:
            self._notify("add", obj)
        else:
            self._notify("update", old, obj)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        t = threading.Thread(target=self.reflector.run, name=f"reflector-{self.name}", daemon=True)
        t.start()
        self._threads.append(t)
        if self.resync_period > 0:
            r = threading.Thread(target=self._resync_loop, name=f"resync-{self.name}", daemon=True)
            r.start()
            self._threads.append(r)

    def _resync_loop(self) -> None:
        while not self._stop.wait(self.resync_period):
            if not self._synced.is_set():
                continue
            with self._lock:
                for obj in self.indexer.list():
                    self._notify("update", obj, obj)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.reflector.stop()
        for h in self._handlers:
            h.stop()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    @property
    def started(self) -> bool:
        return self._started

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def last_sync_resource_version(self) -> str:
        return self.reflector.last_resource_version


def _then(first: Callable[[JSON], JSON] | None,
          second: Callable[[JSON], JSON] | None) -> Callable[[JSON], JSON] | None:
    """``first``, then ``second`` (either may be None)."""
    if first is None or second is None:
        return first or second
    return lambda obj: second(first(obj))


class SharedInformerFactory:
    """One informer per (apiVersion, kind, namespace), shared by every controller asking.

    ``transform`` runs on every object before it is stored (default: strip managedFields;
    ``None`` keeps objects as received). ``informer_for(..., transform=f)`` adds one
    kind's own, run after it (a Node's fields nobody reads, ``controllers/informers.py``):
    the informer is shared, so a second caller must ask for the same one."""

    def __init__(
        self,
        client: Client,
        namespace: str | None = None,
        resync_period: float = 0.0,
        watch_timeout: tuple[float, float] = (300.0, 600.0),
        transform: Callable[[JSON], JSON] | None = strip_managed_fields,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.resync_period = resync_period
        self.watch_timeout = watch_timeout
        self.transform = transform
        self._informers: dict[tuple[str, str, str | None], SharedIndexInformer] = {}
        self._lock = threading.Lock()
        self._started = False

    def informer_for(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        transform: Callable[[JSON], JSON] | None = None,
    ) -> SharedIndexInformer:
        ns = namespace if namespace is not None else self.namespace
        key = (api_version, kind, ns)
        with self._lock:
            inf = self._informers.get(key)
            if inf is None:
                inf = SharedIndexInformer(
                    self.client,
                    api_version,
                    kind,
                    namespace=ns,
                    resync_period=self.resync_period,
                    watch_timeout=self.watch_timeout,
                    transform=_then(self.transform, transform),
                )
                inf.kind_transform = transform
                self._informers[key] = inf
                if self._started:  # asked for after the start: started now
                    inf.start()
            elif transform is not None and inf.kind_transform is not transform:
                raise ValueError(f"the {kind} informer is shared: it was made with the "
                                 f"transform {inf.kind_transform!r}, not {transform!r}")
        if indexers:
            inf.add_indexers(indexers)
        return inf

    def informers(self) -> list[SharedIndexInformer]:
        with self._lock:
            return list(self._informers.values())

    def start(self) -> None:
        with self._lock:
            self._started = True
            infs = list(self._informers.values())
        for inf in infs:
            inf.start()

    def wait_for_cache_sync(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for inf in self.informers():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not inf.wait_for_sync(left):
                return False
        return True

    def has_synced(self) -> bool:
        return all(i.has_synced() for i in self.informers())

    def stop(self) -> None:
        for inf in self.informers():
            inf.stop()
