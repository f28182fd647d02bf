"""A thread-safe object store with named indexes (port of client-go's ThreadSafeStore/Indexer).

Cached objects are shared by every reader, so they are *frozen* when they enter the store:
dicts become :class:`FrozenDict` and lists :class:`FrozenList`, subclasses of ``dict`` and
``list`` whose mutating methods raise ``TypeError``. Reads are then free (no copy per get);
the cost is one recursive conversion per object per watch event, less than one
deep copy. A caller that wants to change an object takes a private mutable copy with
:func:`thaw` (``obj = thaw(cached)``) and sends that to the API server.

Equal strings of cached objects are one ``str`` (``_share``): the JSON decoder makes a
new string for every value of every event, and most values repeat from object to
object (``True``, ``Running``, a node's name, an image, a timestamp of the same
second, our labels' values). At 1,000 nodes with 1,000 units bound they were 7 MiB of
the controller's 66 MiB of Python objects (bench/README.md, round 12); a pod of the
benchmark holds 60 strings, 3.7 KiB. The pool is a plain dict of at most
``POOL_SIZE`` strings of at most ``POOL_MAX_LEN`` characters, emptied when full, so
it keeps at most that many strings of deleted objects alive and never grows with
the cluster; after it is emptied, equal strings are shared again from their next
occurrence on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

JSON = dict[str, Any]
IndexFunc = Callable[[JSON], list[str]]

NAMESPACE_INDEX = "namespace"
OWNER_UID_INDEX = "owner-uid"
NODE_NAME_INDEX = "spec.nodeName"


def _readonly(self: Any, *a: Any, **kw: Any) -> Any:
    raise TypeError("cached objects are read-only; use runtime.store.thaw(obj) for a mutable copy")


class FrozenDict(dict):
    """A ``dict`` that refuses mutation (JSON-serializable, compares equal to dicts)."""

    __slots__ = ()
    __setitem__ = _readonly
    __delitem__ = _readonly
    __ior__ = _readonly
    clear = _readonly
    pop = _readonly
    popitem = _readonly
    setdefault = _readonly
    update = _readonly

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return thaw(self)

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


class FrozenList(list):
    """A ``list`` that refuses mutation."""

    __slots__ = ()
    __setitem__ = _readonly
    __delitem__ = _readonly
    __iadd__ = _readonly
    __imul__ = _readonly
    append = _readonly
    extend = _readonly
    insert = _readonly
    pop = _readonly
    remove = _readonly
    clear = _readonly
    sort = _readonly
    reverse = _readonly

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return thaw(self)

    def __reduce__(self) -> Any:
        return (list, (list(self),))


def freeze(obj: Any) -> Any:
    """Recursively convert dicts/lists to their read-only variants, their strings
    shared with equal ones already cached (the module's pool).

    Objects from the wire are plain dicts, lists and scalars: each container is copied
    at C speed (``FrozenDict(d)``, ``FrozenList(l)``) and only its container and string
    values are visited again, so a number costs no Python call. Already frozen parts
    are kept."""
    t = type(obj)
    if t is dict:
        return _freeze_dict(obj)
    if t is list:
        return _freeze_list(obj)
    if t is str:
        return _share(obj)
    if t is FrozenDict or t is FrozenList or not isinstance(obj, (dict, list)):
        return obj
    return _freeze_dict(obj) if isinstance(obj, dict) else _freeze_list(obj)


#: the strings shared by cached objects (``_share``; the module's docstring)
_POOL: dict[str, str] = {}
POOL_SIZE = 16_384
#: longer strings (a message, a last-applied configuration) rarely repeat
POOL_MAX_LEN = 128
_pooled = _POOL.get


def _share(s: str) -> str:
    """The pool's string equal to ``s``, ``s`` itself when it is the first. Callers
    on several watch threads at once may each put an equal string in: both stay
    correct, one is shared from then on."""
    got = _pooled(s)
    if got is not None:
        return got
    if len(s) <= POOL_MAX_LEN:
        if len(_POOL) >= POOL_SIZE:
            _POOL.clear()
        _POOL[s] = s
    return s


_NUMBERS = frozenset({int, float, bool, type(None)})


def _freeze_dict(d: dict) -> FrozenDict:
    out = FrozenDict(d)
    for k, v in d.items():
        t = type(v)
        if t is str:
            s = _pooled(v) or _share(v)
            if s is not v:
                dict.__setitem__(out, k, s)
        elif t is dict:
            dict.__setitem__(out, k, _freeze_dict(v))
        elif t is list:
            dict.__setitem__(out, k, _freeze_list(v))
        elif t not in _NUMBERS and t is not FrozenDict and t is not FrozenList \
                and isinstance(v, (dict, list)):
            dict.__setitem__(out, k, freeze(v))
    return out


def _freeze_list(lst: list) -> FrozenList:
    for v in lst:
        if type(v) not in _NUMBERS:
            return FrozenList([freeze(x) for x in lst])
    return FrozenList(lst)


def thaw(obj: Any) -> Any:
    """A private, mutable deep copy (plain dicts and lists) of a (frozen) object."""
    if isinstance(obj, dict):
        return {k: thaw(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [thaw(v) for v in obj]
    return obj


def meta_namespace_key(obj: JSON) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    if isinstance(obj, DeletedFinalStateUnknown):
        return obj.key
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{ns}/{md['name']}" if ns else md["name"]


def split_key(key: str) -> tuple[str | None, str]:
    if "/" in key:
        ns, name = key.split("/", 1)
        return ns, name
    return None, key


class DeletedFinalStateUnknown:
    """Tombstone: the object was deleted while the watch was down; ``obj`` is its last state."""

    __slots__ = ("key", "obj")

    def __init__(self, key: str, obj: JSON) -> None:
        self.key = key
        self.obj = obj

    def __repr__(self) -> str:
        return f"DeletedFinalStateUnknown({self.key!r})"


def index_by_namespace(obj: JSON) -> list[str]:
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if ns else []


def index_by_owner_uid(obj: JSON) -> list[str]:
    return [
        r["uid"] for r in (obj.get("metadata") or {}).get("ownerReferences") or [] if r.get("uid")
    ]


def index_by_node_name(obj: JSON) -> list[str]:
    n = (obj.get("spec") or {}).get("nodeName")
    return [n] if n else []


def field_indexer(*path: str) -> IndexFunc:
    """An index function on a (nested) scalar field, e.g. ``field_indexer("spec", "nodeName")``."""

    def fn(obj: JSON) -> list[str]:
        cur: Any = obj
        for p in path:
            if not isinstance(cur, dict):
                return []
            cur = cur.get(p)
        return [str(cur)] if cur not in (None, "") else []

    return fn


DEFAULT_INDEXERS: dict[str, IndexFunc] = {
    NAMESPACE_INDEX: index_by_namespace,
    OWNER_UID_INDEX: index_by_owner_uid,
}


class Indexer:
    """Thread-safe ``key -> object`` store with named secondary indexes.

    Index functions map an object to zero or more index values; ``by_index(name, value)``
    returns every object whose function produced ``value``. Objects are frozen on write.
    """

    def __init__(
        self,
        indexers: dict[str, IndexFunc] | None = None,
        key_func: Callable[[JSON], str] = meta_namespace_key,
    ) -> None:
        self._lock = threading.RLock()
        self._items: dict[str, JSON] = {}
        self._key_func = key_func
        self._indexers: dict[str, IndexFunc] = dict(
            DEFAULT_INDEXERS if indexers is None else indexers
        )
        # index name -> index value -> set of keys
        self._indices: dict[str, dict[str, set[str]]] = {n: {} for n in self._indexers}

    # ---------------------------------------------------------------- indexes
    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """Add indexes (also after items exist; they are indexed now)."""
        with self._lock:
            for name, fn in indexers.items():
                if name in self._indexers:
                    if self._indexers[name] is fn:
                        continue
                    raise ValueError(f"indexer {name!r} already exists")
                self._indexers[name] = fn
                idx: dict[str, set[str]] = {}
                for key, obj in self._items.items():
                    for v in fn(obj):
                        idx.setdefault(v, set()).add(key)
                self._indices[name] = idx

    def _update_indices(self, old: JSON | None, new: JSON | None, key: str) -> None:
        for name, fn in self._indexers.items():
            idx = self._indices[name]
            old_vals = fn(old) if old is not None else []
            new_vals = fn(new) if new is not None else []
            if old_vals == new_vals:
                continue
            for v in old_vals:
                s = idx.get(v)
                if s is not None:
                    s.discard(key)
                    if not s:
                        del idx[v]
            for v in new_vals:
                idx.setdefault(v, set()).add(key)

    # ---------------------------------------------------------------- writes
    def key_of(self, obj: JSON) -> str:
        return self._key_func(obj)

    def add(self, obj: JSON) -> JSON:
        """Insert or replace; returns the frozen object stored."""
        frozen = freeze(obj)
        key = self._key_func(frozen)
        with self._lock:
            old = self._items.get(key)
            self._items[key] = frozen
            self._update_indices(old, frozen, key)
        return frozen

    update = add

    def delete(self, obj_or_key: JSON | str) -> JSON | None:
        key = obj_or_key if isinstance(obj_or_key, str) else self._key_func(obj_or_key)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._update_indices(old, None, key)
            return old

    def replace(self, objs: Iterable[JSON]) -> None:
        """Atomically swap the whole content."""
        frozen = {self._key_func(o): o for o in (freeze(x) for x in objs)}
        with self._lock:
            self._items = frozen
            self._indices = {n: {} for n in self._indexers}
            for key, obj in frozen.items():
                self._update_indices(None, obj, key)

    # ---------------------------------------------------------------- reads
    def get(self, obj: JSON) -> JSON | None:
        return self.get_by_key(self._key_func(obj))

    def get_by_key(self, key: str) -> JSON | None:
        with self._lock:
            return self._items.get(key)

    def get_by_name(self, name: str, namespace: str | None = None) -> JSON | None:
        return self.get_by_key(f"{namespace}/{name}" if namespace else name)

    def list(self) -> list[JSON]:
        with self._lock:
            return list(self._items.values())

    def list_keys(self) -> list[str]:
        with self._lock:
            return list(self._items.keys())

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def by_index(self, index_name: str, value: str) -> list[JSON]:
        with self._lock:
            if index_name not in self._indices:
                raise KeyError(f"no index {index_name!r}")
            keys = self._indices[index_name].get(value, ())
            return [self._items[k] for k in keys]

    def index_keys(self, index_name: str, value: str) -> list[str]:
        with self._lock:
            if index_name not in self._indices:
                raise KeyError(f"no index {index_name!r}")
            return sorted(self._indices[index_name].get(value, ()))

    def index_values(self, index_name: str) -> list[str]:
        with self._lock:
            return list(self._indices[index_name].keys())

    def index(self, index_name: str, obj: JSON) -> list[JSON]:
        """Objects sharing any index value with ``obj``."""
        fn = self._indexers[index_name]
        with self._lock:
            keys: set[str] = set()
            for v in fn(obj):
                keys |= self._indices[index_name].get(v, set())
            return [self._items[k] for k in keys]

    def list_namespace(self, namespace: str, selector: dict[str, str] | None = None) -> list[JSON]:
        objs = (
            self.by_index(NAMESPACE_INDEX, namespace)
            if NAMESPACE_INDEX in self._indices
            else [o for o in self.list() if (o.get("metadata") or {}).get("namespace") == namespace]
        )
        if selector:
            objs = [o for o in objs if matches_labels(o, selector)]
        return objs


def matches_labels(obj: JSON, selector: dict[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())
