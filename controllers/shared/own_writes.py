"""Our own writes that the informers have not shown yet, by object UID: one record
for every write this controller makes (kube-scheduler's assume cache,
controller-runtime's expectations).

The informers' caches lag the API: right after a write, the cache may still hand
out the copy from before, and acting on it would undo the write (adopt a placement
we released, create a child we made, bind a pod we bound). Three kinds of write
are remembered here, each until the informer shows it:

- **Children** (``created``): a Pod or Job created for a workload counts as there
  from the moment its create answers (``children(owner_uid)``), so it is never
  created twice and asking the workload's children to go includes it. It ends at
  any informer event of that UID, when its owner is forgotten, or after ``ttl``
  seconds (a child created and deleted between two lists is never seen). Before
  that, while its create is on its way (``creating``, by namespace and name: no
  UID yet), the manifest sent is kept (``on_its_way``): the watch may bring the
  child before its create's answer is taken in.
- **Writes of an object** (status writes, a gang's commit, our finalizer):
  ``writing(obj, status)`` marks a write on its way before it is sent and returns
  its mark; ``wrote(obj, mark)`` records where it landed. While a write is on its
  way every cached copy is older than it (``is_behind``); after, a copy is older
  when its resourceVersion is below where our last write landed. ``wrote`` of an
  earlier write (one in flight when a later one was marked) leaves the later one's
  mark in place, and still records where it landed; ``cancel(obj, mark)`` takes
  back a mark whose write will never be sent (settled, or refused). ``wrote``
  without a mark (a synchronous write) is the latest. Read your writes:
  ``view(raw)`` is the cached copy with the status we last asked for, until the
  cache shows the write that carried it. Our finalizer, added by the status writer
  (``finalized``), counts as on the object (``finalizer_added``) until the object is
  forgotten: a reconcile asks for it once; while its patch is on its way
  (``finalizing``) the watch may bring it first (``write_echo``).
- **Seed bindings** (``bound``): a pod we bound counts as bound
  (``binding_on_its_way``) until the informer shows it on a node or deleted (it
  was in the cache when we bound it, so a relist that misses it deletes it).

Keyed by UID, so nothing here is ever taken for another object of the same name
(deleted and created again): a delete event (``deleted``) drops every record of
that UID. One lock, a leaf: no method calls out while holding it, so callers may
hold their own locks (the placement state's) when they ask.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from api.v1alpha1.keys import CHILDREN_FINALIZER
from internal.objects import JSON, resource_version

#: how long a created child is assumed without the informer showing it
TTL = 60.0

_marks = itertools.count(1)  # one per write on its way, unique across instances


def _stored(value: Any) -> Any:
    """``value`` as a merge patch leaves it stored: null fields dropped."""
    if isinstance(value, dict):
        return {k: _stored(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_stored(v) for v in value]
    return value


def _meta_but_version(obj: JSON) -> dict[str, Any]:
    return {k: v for k, v in (obj.get("metadata") or {}).items()
            if k not in ("resourceVersion", "managedFields")}


def _uid(obj: Any) -> str:
    raw = getattr(obj, "obj", obj) or {}  # a delete tombstone carries the object
    if not isinstance(raw, Mapping):
        return ""
    return str((raw.get("metadata") or {}).get("uid") or "")


@dataclass(slots=True)
class _Writes:
    """Our writes of one object."""

    landed: int = 0  # resourceVersion where our last write landed
    mark: int | None = None  # the latest write on its way
    status: dict[str, Any] | None = None  # the status we last asked for
    status_mark: int | None = None  # the write that carries it
    status_rv: int = 0  # where it landed (0: not yet)
    finalizer: bool = False  # our finalizer landed on it
    finalizer_rv: int = 0  # where our finalizer's patch landed (0: not known)
    finalizing: bool = False  # our finalizer's patch is on its way


class OwnWrites:
    def __init__(self, ttl: float = TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.clock = ttl, clock
        self._lock = threading.Lock()
        self._writes: dict[str, _Writes] = {}  # object UID -> our writes of it
        # owner UID -> child UID -> (the created object, when)
        self._children: dict[str, dict[str, tuple[JSON, float]]] = {}
        self._owner_of: dict[str, str] = {}  # child UID -> owner UID
        self._bindings: set[str] = set()  # pod UIDs our Binding landed for
        #: child UID -> resourceVersion: the informer showed the child exactly as its
        #: create answered (``created_echo`` asks once); 0: asked before it showed it
        self._echoes: dict[str, int] = {}
        #: (namespace, name) -> (owner UID, the manifest sent): creates on their way
        self._sending: dict[tuple[str, str], tuple[str, JSON]] = {}

    # ------------------------------------------------------------------ informers

    def observed(self, obj: Any) -> None:
        """An informer add or update of ``obj``: the cache knows it now."""
        uid = _uid(obj)
        if not uid:
            return
        raw = getattr(obj, "obj", obj)
        with self._lock:
            self._child_seen(uid, raw)
            if (raw.get("spec") or {}).get("nodeName"):
                self._bindings.discard(uid)
            w = self._writes.get(uid)
            if w is not None:
                self._caught_up(w, raw)

    def deleted(self, obj: Any) -> None:
        """An informer delete of ``obj`` (or its tombstone): nothing of that UID is
        awaited any more (a UID is never used again)."""
        uid = _uid(obj)
        if uid:
            self.forget(uid)

    def forget(self, uid: str) -> None:
        """Object ``uid`` is gone: its writes, bindings and children's records go."""
        with self._lock:
            self._child_seen(uid)
            self._echoes.pop(uid, None)
            self._writes.pop(uid, None)
            self._bindings.discard(uid)
            for child in self._children.pop(uid, {}):
                self._owner_of.pop(child, None)

    # ------------------------------------------------------------------ children

    @contextlib.contextmanager
    def creating(self, owner_uid: str, obj: JSON) -> Iterator[None]:
        """The create of ``obj`` (a child of ``owner_uid``) is on its way while the
        block runs (it sends the create, and calls ``created`` once it answers)."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._lock:
            self._sending[key] = (owner_uid, obj)
        try:
            yield
        finally:
            with self._lock:
                if self._sending.get(key, (None, None))[1] is obj:
                    del self._sending[key]

    def on_its_way(self, obj: JSON) -> JSON | None:
        """The manifest of a create on its way of ``obj``'s namespace and name, sent
        for ``obj``'s controller owner (None: none)."""
        meta = obj.get("metadata") or {}
        owner = next((r.get("uid") for r in meta.get("ownerReferences") or ()
                      if r.get("controller")), None)
        with self._lock:
            sent = self._sending.get((str(meta.get("namespace") or ""),
                                      str(meta.get("name") or "")))
        return sent[1] if sent is not None and owner and sent[0] == owner else None

    def created(self, owner_uid: str, obj: JSON) -> None:
        uid = _uid(obj)
        if not uid:
            return
        with self._lock:
            self._children.setdefault(owner_uid, {})[uid] = (obj, self.clock())
            self._owner_of[uid] = owner_uid

    def children(self, owner_uid: str) -> list[JSON]:
        """Children of ``owner_uid`` created and not yet seen (fresher than ``ttl``)."""
        with self._lock:
            self._expire_children(owner_uid)
            return [o for o, _ in self._children.get(owner_uid, {}).values()]

    def all_children(self) -> list[JSON]:
        """Every child created and not yet seen (a rebuild of the ledger books them)."""
        with self._lock:
            for owner in list(self._children):
                self._expire_children(owner)
            return [o for kids in self._children.values() for o, _ in kids.values()]

    def _expire_children(self, owner_uid: str) -> None:
        kids = self._children.get(owner_uid)
        if kids is None:
            return
        now = self.clock()
        for uid in [u for u, (_, t) in kids.items() if now - t > self.ttl]:
            del kids[uid]
            self._owner_of.pop(uid, None)
            self._echoes.pop(uid, None)
        if not kids:
            del self._children[owner_uid]

    def _child_seen(self, uid: str, raw: JSON | None = None) -> None:
        owner = self._owner_of.pop(uid, None)
        kids = self._children.get(owner) if owner is not None else None
        if kids is not None:
            made = kids.pop(uid, None)
            rv = resource_version(raw) if raw is not None else 0
            asked = self._echoes.pop(uid, None) == 0  # its handler asked first
            if not asked and made is not None and rv and rv == resource_version(made[0]):
                self._echoes[uid] = rv
            if not kids:
                del self._children[owner]  # type: ignore[arg-type]

    # ---------------------------------------------------------------- echoes

    def created_echo(self, obj: JSON) -> bool:
        """Is ``obj`` (an informer's add) a child we created, exactly as its create
        answered? Its owner's reconcile that made it knew all of it. Asked once per
        child (whether the informer told this object or its handler first)."""
        uid, rv = _uid(obj), resource_version(obj)
        with self._lock:
            seen = self._echoes.pop(uid, None)
            if seen is not None:
                return seen == rv
            owner = self._owner_of.get(uid)
            made = self._children.get(owner, {}).get(uid) if owner is not None else None
            if made is None:
                return False
            self._echoes[uid] = 0  # asked: the informer's sight of it records nothing
            return bool(rv) and resource_version(made[0]) == rv

    def write_echo(self, old: JSON, new: JSON) -> bool:
        """Is the update ``old`` -> ``new`` our own write of the object landing, and
        nothing else: ``new`` is where that write (or our finalizer's patch) landed,
        or shows the very status we asked for (its answer not taken in yet), and
        only its status and our finalizer differ from ``old`` (not its spec, labels,
        annotations, other finalizers or deletion)? The reconcile that wrote it
        knew all of it."""
        rv = resource_version(new)
        with self._lock:
            w = self._writes.get(_uid(new))
            if not rv or w is None:
                return False
            # the version our write landed at, or (its answer not taken in yet) the
            # status we asked for, as the API stores it (no null fields)
            asked = w.status is not None and _stored(w.status) == new.get("status")
            landed = rv in (w.landed, w.finalizer_rv) or asked
            if not landed and not w.finalizing:
                return False
            ours = w.finalizer or w.finalizing
        if old.get("spec") != new.get("spec"):
            return False
        before, after = _meta_but_version(old), _meta_but_version(new)
        if ours:  # our finalizer landing (the status writer adds it) is ours too
            had, has = before.pop("finalizers", None) or [], after.pop("finalizers", None) or []
            if has[:len(had)] != had or len(has) > len(had) + 1:
                return False
            if not landed:  # our finalizer's patch, its answer not taken in yet
                return has == [*had, CHILDREN_FINALIZER] and \
                    old.get("status") == new.get("status") and before == after
        return before == after

    # ---------------------------------------------------------- writes of an object

    def writing(self, obj: JSON, status: dict[str, Any] | None = None) -> int:
        """A write of ``obj`` is on its way (with ``status``: the status it carries,
        which ``view`` shows until the cache does). Mark it before the write can be
        sent: a mark made after the write landed would stay for ever. Returns it."""
        mark = next(_marks)
        uid = _uid(obj)
        if not uid:
            return mark
        with self._lock:
            w = self._writes.setdefault(uid, _Writes())
            w.mark = mark
            if status is not None:
                w.status, w.status_mark, w.status_rv = status, mark, 0
        return mark

    def wrote(self, obj: JSON, mark: int | None = None, *,
              status: dict[str, Any] | None = None) -> None:
        """Our write of ``obj`` landed (``obj`` is what the API answered). With
        ``mark`` (``writing``'s): only if no later write of it is on its way. With
        ``status``: a synchronous write of that status (a gang's commit), which
        ``view`` shows until the cache does."""
        rv = resource_version(obj)
        uid = _uid(obj)
        if not rv or not uid:
            return
        with self._lock:
            w = self._writes.setdefault(uid, _Writes())
            if mark is not None and mark == w.status_mark:
                w.status_rv = rv
            # where it landed counts even while a later write is on its way: that one
            # may never be sent (settled, ``cancel``)
            w.landed = max(w.landed, rv)
            if mark is not None and w.mark is not None and mark != w.mark:
                return  # a later write is on its way: every cached copy is older
            w.mark = None
            if status is not None:
                w.status, w.status_mark, w.status_rv = dict(status), None, rv

    def cancel(self, obj: JSON, mark: int | None) -> None:
        """The write that carries ``mark`` will never be sent (settled, refused): it
        no longer makes every cached copy older, and ``view`` no longer shows the
        status it carried (else a reconcile that wants that status again finds it
        unchanged and writes nothing, for ever)."""
        with self._lock:
            w = self._writes.get(_uid(obj))
            if w is None or mark is None:
                return
            if w.mark == mark:
                w.mark = None
            if w.status_mark == mark:
                w.status = w.status_mark = None

    def is_behind(self, obj: JSON) -> bool:
        """Is ``obj`` (from the cache) older than our last write of it? (A copy
        without a resourceVersion never is.)"""
        rv = resource_version(obj)
        with self._lock:
            w = self._writes.get(_uid(obj))
            return bool(rv) and w is not None and (w.mark is not None or rv < w.landed)

    def ahead_of(self, raw: JSON) -> bool:
        """Did a write of ours land after the cache's copy of ``raw``? (A precondition
        on that copy's resourceVersion would conflict.)"""
        with self._lock:
            w = self._writes.get(_uid(raw))
            return w is not None and w.landed > resource_version(raw)

    def view(self, raw: JSON) -> JSON | None:
        """``raw`` with the status we last asked for, while the cache does not show it
        yet (None: the cache is current, or we asked for no status of this object)."""
        with self._lock:
            w = self._writes.get(_uid(raw))
            if w is None or w.status is None or self._caught_up(w, raw):
                return None
            return {**raw, "status": w.status}

    @staticmethod
    def _caught_up(w: _Writes, raw: JSON) -> bool:
        """Under the lock: does ``raw`` show our last status write (nothing of ours
        on its way)? Then the status is the cache's to show: forgotten here."""
        if w.status is not None and w.status_rv and w.mark is None and \
                resource_version(raw) >= w.status_rv:
            w.status = w.status_mark = None
        return w.status is None

    @contextlib.contextmanager
    def finalizing(self, obj: JSON) -> Iterator[None]:
        """Our finalizer's patch of ``obj`` is on its way while the block runs (it
        sends the patch, and calls ``finalized`` once it lands)."""
        uid = _uid(obj)
        with self._lock:
            self._writes.setdefault(uid, _Writes()).finalizing = True
        try:
            yield
        finally:
            with self._lock:
                w = self._writes.get(uid)
                if w is not None:
                    w.finalizing = False
                    if w == _Writes():  # nothing else of ours: no record left behind
                        del self._writes[uid]

    def finalized(self, obj: JSON, rv: int = 0) -> None:
        """Our finalizer landed on ``obj`` (this UID), at resourceVersion ``rv`` when
        known; the cache may not show it yet."""
        uid = _uid(obj)
        if uid:
            with self._lock:
                w = self._writes.setdefault(uid, _Writes())
                w.finalizer, w.finalizer_rv = True, rv or w.finalizer_rv

    def finalizer_added(self, uid: str) -> bool:
        """Did our finalizer land on object ``uid``? (Until the object is forgotten.)"""
        with self._lock:
            w = self._writes.get(uid)
            return w is not None and w.finalizer

    # ------------------------------------------------------------------ bindings

    def bound(self, pod: JSON) -> None:
        """Our Binding of ``pod`` landed; the cache may still show it unbound."""
        uid = _uid(pod)
        if uid:
            with self._lock:
                self._bindings.add(uid)

    def binding_on_its_way(self, pod: JSON) -> bool:
        """Did we bind ``pod`` (this UID) and the cache does not show it yet?"""
        uid = _uid(pod)
        with self._lock:
            return uid in self._bindings

    def __len__(self) -> int:
        """Records kept (children, bindings, objects written): for tests."""
        with self._lock:
            return len(self._owner_of) + len(self._bindings) + len(self._writes)
