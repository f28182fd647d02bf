"""The queue manager: what the queue gate reads, kept from the informers' events
(Kueue's ``pkg/queue``: pending order per queue, apart from the placement cache).

Fed by the GPUQueue, Namespace and GPUWorkload informers' handlers (``watch``,
inline: memory only, under one leaf lock), it holds

- **the queues**, parsed once per spec change (keyed by uid and generation, which
  the queue-status controller's writes leave alone), their ``Quotas``, and a
  ``generation`` bumped on every spec change and whenever the queues selecting a
  namespace change (the placement cache counts each queue's usage again on it,
  ``controllers/placement/queue_counts.py``);
- **which queues select each namespace**, by name (the first is its default queue),
  worked out when the namespace's labels or a queue's spec change, never per
  decision; one entry per namespace the cache holds, none of a deleted one;
- **each workload** of the cache in a few fields: its namespace, named queue,
  creation time and whether it is live (not placed, not being deleted), for the
  queues' counts and the gate's questions (``created``, ``queue_of_key``);
- **each queue's waiting line**: the workloads the gate last refused for quota, in
  BestEffortFIFO order (``internal/scheduling/admission.py``), kept sorted as they
  come and go (``bisect``). A workload leaves its line when it is admitted, refused
  for devices only, placed, deleted, or being deleted.

Guarantees: nothing here lists an informer or calls out while the lock is held;
what it holds is bounded by what the caches hold (a workload the cache does not hold
never takes a place in a line; a pod group's place goes with its first member gone).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pydantic import ValidationError

from api.v1alpha1.keys import QUEUED_LABEL
from api.v1alpha1.queues import GPUQueue
from api.v1alpha1.types import Phase
from internal.objects import object_key
from internal.scheduling.admission import Line, Order, Waiting, queued_behind
from internal.scheduling.quota import Queue, Quotas
from runtime import FuncHandler
from runtime.store import DeletedFinalStateUnknown

JSON = Mapping[str, Any]
DONE = (Phase.SUCCEEDED.value, Phase.FAILED.value)


def _meta(raw: Any) -> JSON:
    return (raw or {}).get("metadata") or {}


def _spec_key(raw: JSON) -> tuple[str, str]:
    """(uid, generation) of a GPUQueue; the resourceVersion and the cached copy
    where it has no generation (an object not from an API server)."""
    m = _meta(raw)
    gen = m.get("generation")
    return (m.get("uid") or "",
            str(gen) if gen is not None else f"{m.get('resourceVersion')}/{id(raw)}")


def labels_of(namespace: str, raw: JSON | None) -> dict[str, str]:
    """The namespace's labels a selector reads: not the manager's own mark, which
    follows the selection (a selector on it would chase itself)."""
    labels = dict(_meta(raw).get("labels") or {})
    labels.pop(QUEUED_LABEL, None)
    labels.setdefault("kubernetes.io/metadata.name", namespace)
    return labels


@dataclass(frozen=True, slots=True)
class Tracked:
    """What the queues need of one GPUWorkload."""

    namespace: str
    queue: str | None  # spec.queueName
    created: str
    live: bool  # not placed, not being deleted: it may wait in a line
    admitted: bool | None  # placed or past Pending; None: Succeeded or Failed

    @classmethod
    def of(cls, raw: JSON) -> Tracked:
        meta, status = _meta(raw), raw.get("status") or {}
        phase = status.get("phase") or Phase.PENDING.value
        placed = bool(status.get("placements"))
        return cls(meta.get("namespace") or "default",
                   (raw.get("spec") or {}).get("queueName") or None,
                   meta.get("creationTimestamp") or "",
                   not placed and not meta.get("deletionTimestamp"),
                   None if phase in DONE else placed or phase != Phase.PENDING.value)


def _key(obj: Any) -> str:
    return obj.key if isinstance(obj, DeletedFinalStateUnknown) else object_key(obj)


def _name(obj: Any) -> str:
    return str(_meta(getattr(obj, "obj", obj)).get("name") or "")


class QueueManager:
    """Queues, namespaces' selections, workloads and waiting lines (above); one
    leaf lock guards every field."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._raw: dict[str, JSON] = {}  # queue name -> as cached
        self._specs: dict[str, tuple[tuple[str, str], GPUQueue | None]] = {}
        self._parsed: list[GPUQueue] = []  # by name; replaced, never changed
        self._quotas = Quotas(())
        self.generation = 0
        self._labels: dict[str, dict[str, str]] = {}
        self._selecting: dict[str, tuple[str, ...]] = {}
        self._workloads: dict[str, Tracked] = {}
        self._waiting: dict[str, Waiting] = {}
        self._lines: dict[str, list[tuple[Order, Waiting]]] = {}
        #: admitted pod group key -> its oldest member's creation (a reclaim's order)
        self._groups: dict[str, str] = {}
        #: a group this manager did not admit (admitted before it started): its
        #: oldest member's creation as the API has it, or None (set by the pod
        #: binding: ``PodBindingReconciler.group_created``); called unlocked
        self.group_dates: Callable[[str], str | None] = lambda key: None

    # ------------------------------------------------------------ events

    def watch(self, queues: Any, namespaces: Any, workloads: Any) -> None:
        """Follows the three informers (inline handlers: memory only)."""
        queues.add_event_handler(FuncHandler(
            self.queue_changed, lambda _o, n: self.queue_changed(n), self.queue_deleted,
            name="queue-manager-queues", inline=True))
        namespaces.add_event_handler(FuncHandler(
            self.namespace_changed, lambda _o, n: self.namespace_changed(n),
            lambda o: self.namespace_deleted(_name(o)),
            name="queue-manager-namespaces", inline=True))
        workloads.add_event_handler(FuncHandler(
            self.workload_changed, lambda _o, n: self.workload_changed(n),
            lambda o: self.workload_deleted(_key(o)),
            name="queue-manager-workloads", inline=True))

    def queue_changed(self, raw: JSON) -> None:
        name, spec = _name(raw), _spec_key(raw)
        with self._lock:
            self._raw[name] = raw
            seen = self._specs.get(name)
            if seen is not None and seen[0] == spec:
                return  # a status write: no quota changed
            try:
                parsed: GPUQueue | None = GPUQueue.model_validate(raw)
            except ValidationError:
                parsed = None  # the CRD's schema refuses what would fail here
            self._specs[name] = (spec, parsed)
            self._queues_changed()

    def queue_deleted(self, obj: Any) -> None:
        name = _name(obj)
        with self._lock:
            self._raw.pop(name, None)
            if self._specs.pop(name, None) is not None:
                self._queues_changed()

    def _queues_changed(self) -> None:
        """Under the lock: parsed list, quotas and every namespace's selection anew."""
        self._parsed = sorted((q for _, q in self._specs.values() if q is not None),
                              key=lambda q: q.metadata.name)
        self._quotas = Quotas(Queue.of(q) for q in self._parsed)
        self.generation += 1
        self._selecting = {ns: self._select(labels) for ns, labels in self._labels.items()}

    def _select(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        return tuple(q.metadata.name for q in self._parsed if q.spec.namespace_selector
                     is not None and q.spec.namespace_selector.selects(labels))

    def namespace_changed(self, raw: JSON) -> None:
        name = _name(raw)
        labels = labels_of(name, raw)
        with self._lock:
            if self._labels.get(name) == labels:
                return
            was = self._selection(name)
            self._labels[name] = labels
            self._selecting[name] = self._select(labels)
            if self._selecting[name] != was:
                self.generation += 1  # its holders count against other queues now

    def namespace_deleted(self, name: str) -> None:
        """Namespace ``name`` is gone: nothing of it is kept."""
        with self._lock:
            self._labels.pop(name, None)
            was = self._selecting.pop(name, None)
            if was is not None and was != self._selection(name):
                self.generation += 1  # what it still holds counts by its name alone

    def _selection(self, namespace: str) -> tuple[str, ...]:
        """Under the lock: the queues selecting ``namespace``, by name (one the
        cache does not hold: as its name alone)."""
        found = self._selecting.get(namespace)
        if found is None:
            found = self._select(labels_of(namespace, None)) if self._parsed else ()
        return found

    def workload_changed(self, raw: JSON) -> None:
        key, t = object_key(raw), Tracked.of(raw)
        with self._lock:
            self._workloads[key] = t
            if not t.live:
                self._unwait(key)

    def workload_deleted(self, key: str) -> None:
        with self._lock:
            self._workloads.pop(key, None)
            self._unwait(key)

    # ------------------------------------------------------------ reading

    def queues(self) -> list[GPUQueue]:
        """The GPUQueues by name (the same list while no spec changes)."""
        with self._lock:
            return self._parsed

    def quotas(self) -> Quotas:
        with self._lock:
            return self._quotas

    def raw_queue(self, name: str) -> JSON | None:
        with self._lock:
            return self._raw.get(name)

    def selecting(self, namespace: str) -> tuple[str, ...]:
        """Every queue whose namespaceSelector selects ``namespace``, by name (one
        the cache does not hold: as its name alone, and not kept)."""
        with self._lock:
            return self._selection(namespace)

    def namespaces(self) -> list[str]:
        with self._lock:
            return sorted(self._labels)

    def workload(self, key: str) -> Tracked | None:
        with self._lock:
            return self._workloads.get(key)

    def queue_of_key(self, key: str, namespace: str) -> str | None:
        """The queue that workload ``key`` names, else ``namespace``'s first."""
        with self._lock:
            t = self._workloads.get(key)
        if t is not None and t.queue:
            return t.queue
        return next(iter(self.selecting(namespace)), None)

    def counts(self) -> dict[str, tuple[int, int]]:
        """queue -> (admitted, pending) workloads (Succeeded and Failed left out)."""
        with self._lock:
            tracked = list(self._workloads.values())
        out: dict[str, tuple[int, int]] = {}
        for t in tracked:
            if t.admitted is None:
                continue
            name = t.queue or next(iter(self.selecting(t.namespace)), None)
            if name is None:
                continue
            admitted, pending = out.get(name, (0, 0))
            out[name] = (admitted + 1, pending) if t.admitted else (admitted, pending + 1)
        return out

    # ------------------------------------------------------------ waiting lines

    def wait(self, key: str, entry: Waiting) -> None:
        """``key`` was refused for quota: its place in ``entry.queue``'s line (only a
        live workload the cache holds takes one)."""
        with self._lock:
            self._unwait(key)
            t = self._workloads.get(key)
            if t is None or not t.live:
                return
            self._waiting[key] = entry
            bisect.insort(self._lines.setdefault(entry.queue, []), (entry.order(key), entry))

    def wait_group(self, key: str, entry: Waiting) -> None:
        """Pod group ``key`` (``PodGroup:<ns>/...``, no GPUWorkload) was refused for
        quota: its place in ``entry.queue``'s line, as a workload's. The pod binding
        takes it out (``settle``) once the group is admitted, refused for devices
        only, or a member of it is gone (``controllers/podbinding/groupquota.py``)."""
        with self._lock:
            self._unwait(key)
            self._waiting[key] = entry
            bisect.insort(self._lines.setdefault(entry.queue, []), (entry.order(key), entry))

    def settle(self, key: str) -> None:
        """``key`` was admitted, or refused for devices only: it waits for nothing."""
        with self._lock:
            self._unwait(key)

    def _unwait(self, key: str) -> None:
        entry = self._waiting.pop(key, None)
        if entry is None:
            return
        line = self._lines[entry.queue]
        i = bisect.bisect_left(line, (entry.order(key),))
        if i < len(line) and line[i][0] == entry.order(key):
            del line[i]
        if not line:
            del self._lines[entry.queue]

    def admit_group(self, key: str, created: str) -> None:
        """Pod group ``key`` was admitted (its oldest member made at ``created``): it
        waits for nothing, and a reclaim takes it in its place among the borrowers
        (``group_created``)."""
        with self._lock:
            self._unwait(key)
            self._groups[key] = created

    def group_created(self, key: str) -> str | None:
        """When the admitted pod group ``key``'s oldest member was made: as recorded
        at its admission, else (admitted before this manager started, or its
        record gone with a member) as its members' pods say (``group_dates``), or
        None."""
        with self._lock:
            found = self._groups.get(key)
        return found if found is not None else self.group_dates(key)

    def forget_group(self, key: str) -> None:
        """A member of pod group ``key`` is gone: no line, no admission kept."""
        with self._lock:
            self._unwait(key)
            self._groups.pop(key, None)

    def line(self, queue: str) -> list[str]:
        """The keys waiting in ``queue``'s line, first first."""
        with self._lock:
            return [order[2] for order, _ in self._lines.get(queue, ())]

    def ahead(self, key: str, me: Waiting, q: Queue, quotas: Quotas,
              used: Mapping[str, Fraction]) -> str | None:
        """Why ``key`` lets another go first (``admission.queued_behind``), or None;
        read under the lock (a pure rule: it calls nothing else)."""
        with self._lock:
            lines: Mapping[str, Line] = self._lines
            return queued_behind(key, me, q, quotas, used, lines)

    def remembered(self) -> int:
        """Entries kept for namespaces and waiting workloads: for tests."""
        with self._lock:
            return len(self._waiting) + len(self._selecting) + len(self._groups)

    def size(self) -> dict[str, int]:
        with self._lock:
            return {"queues": len(self._raw), "namespaces": len(self._labels),
                    "workloads": len(self._workloads), "waiting": len(self._waiting)}

