"""The asynchronous, coalescing writer of GPUWorkload status (and of our finalizer).

kube-scheduler's workers send one Binding per pod on their client and leave Events
to a second client that they never wait on. This writer is that second client for
status: a reconcile hands it the status it wants and goes on; writer threads send
it through a client with its own token bucket.

Guarantees:

- **Latest wins.** One entry per workload: a newer desired status replaces one not
  yet sent (counted in ``gpu_orchestrator_status_writes_coalesced_total``). Writes of
  one workload never overlap and go in order.
- **Read your writes.** Every submit is marked in the controller's ``OwnWrites``
  (``controllers/shared/own_writes.py``) before a writer thread can see it, with the status
  it carries, and every write that lands says where: ``OwnWrites.view(raw)`` gives a
  reconcile the object with the status it last asked for until the cache shows it,
  so a decision is never taken on a status older than our own.
- **Nothing lost.** A failed write is retried with backoff (capped) until it lands,
  the workload is gone (NotFound) or it is another object of that name (UID), or
  until a synchronous commit supersedes it (``settle``) or the workload is
  forgotten (``forget``; nothing of it is recorded then, the finalizer included).
- **Nothing resent for ever.** A write the API server refuses for good (400, 403,
  413, 422: the same write gets the same answer; ``controllers/status/refusals.py``)
  is sent once and reported (a ``StatusRefused`` Warning Event, a metric), and its
  mark is taken back: the reconciler no longer takes its status for current, and
  its next reconcile writes again (``refused`` says why, for the backstop).
- **Lag bounded and measured.** The time from the first submit of a status to its
  write is ``gpu_orchestrator_status_write_lag_seconds``; the queue is at most one
  entry per workload, so the lag is at most the queue over the client's QPS, plus
  the pacer's hold (and, with a busy rate, its ``max_lag``).
- **Synchronous commits win.** Gangs and Job mode commit their placement with a
  resourceVersion precondition on the workers' client; ``settle(key)`` first drops
  the pending write of that workload and waits for one in flight, which is then
  never retried (the commit supersedes it); a write dropped, or settled in flight
  and failed, takes back its mark in ``OwnWrites`` (it never lands). ``settle``
  says whether it settled: False (a write still in flight after its timeout) means
  no commit now, requeue.
  The commit itself is recorded in ``OwnWrites`` (``wrote(..., status=...)``).
- **Only on its object.** Every status write carries the workload's UID as a
  precondition, so it never lands on another object of the same name (deleted and
  re-created meanwhile): the write is dropped (``patches.patch_status``
  says how). It carries no resourceVersion: the writer coalesces and writes over its own
  previous writes (latest wins), and what must not be undone by an older write, a
  gang's commit, is protected by ``settle`` above.
- **Paced** (with a ``Pacer``, ``controllers/status/pacing.py``): a Pending or
  Scheduled status is held a short lag for a newer one to replace it, and while
  placements are being made writes go at a bounded rate; ``stop`` drains at once.
- The finalizer (``gpu.orchestrator.dev/children``) rides with the first status of a
  placed workload, as its own merge patch with a resourceVersion precondition,
  never added to an object being deleted; it is never held (the status it came
  with may be: then it is sent first, and the status waits its lag).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from api.v1alpha1.keys import CHILDREN_FINALIZER
from controllers.shared.own_writes import OwnWrites
from controllers.status import refusals
from controllers.status.pacing import Pacer
from controllers.status.patches import add_finalizer, patch_status
from internal import metrics as m
from internal.objects import JSON, object_key
from runtime import NotFound
from runtime.events import EventRecorder
from runtime.store import Indexer

log = structlog.get_logger("status_writer")


LAG, WRITES = m.STATUS_WRITE_LAG, m.STATUS_WRITES
COALESCED, QUEUED = m.STATUS_COALESCED, m.STATUS_QUEUED

#: ``_write``'s answer when it added the finalizer and left the status held
HELD = None

#: a failed write is tried again after this, doubling up to RETRY_MAX
RETRY_BASE = 0.2
RETRY_MAX = 10.0




@dataclass
class _Want:
    uid: str
    namespace: str
    name: str
    status: dict[str, Any]
    finalizer: bool
    since: float  # first submit not yet written
    not_before: float = 0.0
    failures: int = 0
    mark: int | None = None  # OwnWrites' mark of the latest submit it carries


class StatusWriter:
    def __init__(self, client: Any, workloads: Indexer, *, threads: int = 2,
                 own_writes: OwnWrites | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 pacer: Pacer | None = None, recorder: Any = None) -> None:
        self.client = client
        #: where a refusal is reported (default: a recorder of its own, on its client)
        self.recorder = recorder if recorder is not None else EventRecorder(
            client, "gpu-orchestrator")
        self.pacer = pacer  # None: every status is sent as soon as a thread is free
        self.workloads = workloads
        self.threads = threads
        #: our writes the cache has not shown yet (shared with the reconciler and
        #: the placement state): marked at submit, recorded where they land
        self.own_writes = own_writes if own_writes is not None else OwnWrites()
        self.clock = clock
        self._cv = threading.Condition()
        self._pending: dict[str, _Want] = {}
        self._order: deque[str] = deque()  # keys with a pending entry, oldest first
        #: (when it may go, seq, key) of held or backing-off entries (``_next``)
        self._later: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._inflight: set[str] = set()
        self._reporting = 0  # refusals being reported (flush waits for them)
        #: keys whose write in flight was settled or forgotten: not retried if it fails
        self._superseded: set[str] = set()
        self._gone: set[str] = set()  # keys forgotten while a write was in flight
        #: key -> UID whose last write was refused for good (until one lands, or forget)
        self._refused: dict[str, str] = {}
        self._stop = False
        self._workers: list[threading.Thread] = []

    # ------------------------------------------------------------------ reconcile side

    def submit(self, raw: JSON, status: dict[str, Any], *, finalizer: bool = False) -> None:
        """Wants ``status`` written for ``raw`` (and, with ``finalizer``, our finalizer
        added). Returns at once."""
        meta = raw["metadata"]
        key = object_key(raw)
        uid = meta.get("uid") or ""
        now = self.clock()
        # Marked before a writer thread can see it: a mark made after the write
        # landed (and after ``wrote``) would say "a write is on its way" for ever,
        # and every cached copy would be taken as older than it; and no write of
        # ours in flight, landing meanwhile, makes an older cached copy look current
        mark = self.own_writes.writing(raw, status)
        with self._cv:
            old = self._pending.get(key)
            if old is not None and old.uid == uid:
                COALESCED.inc()
                old.status = status
                old.finalizer = old.finalizer or finalizer
                old.mark = mark
                if self.pacer is not None:
                    self._order.append(key)  # a held status may be due now
                    self._cv.notify()
                return
            if old is not None:  # another object of that name: its write is dropped
                self.own_writes.cancel(_ref(old), old.mark)
            self._pending[key] = _Want(uid, meta["namespace"], meta["name"], status,
                                       finalizer, since=now, mark=mark)
            if key not in self._inflight:
                self._order.append(key)
            QUEUED.set(len(self._pending))
            self._cv.notify()

    def settle(self, key: str, timeout: float = 30.0) -> bool:
        """Drops ``key``'s pending write and waits for one in flight (a synchronous
        commit that supersedes it follows); that one is not retried if it fails.
        True: nothing of ``key``'s is queued or in flight. False: a write is still in
        flight after ``timeout``; it may land any time, so the caller must not
        commit now (requeue)."""
        deadline = self.clock() + timeout
        with self._cv:
            dropped = self._pending.pop(key, None)
            if dropped is not None:
                QUEUED.set(len(self._pending))
                self.own_writes.cancel(_ref(dropped), dropped.mark)  # never sent
            if key in self._inflight:
                self._superseded.add(key)
            while key in self._inflight:
                if self.clock() >= deadline:
                    log.warning("status.settle_timeout", workload=key, timeout=timeout)
                    return False
                self._cv.wait(0.05)
            return True

    def forget(self, key: str) -> None:
        """The workload is gone: nothing of it is left to write."""
        with self._cv:
            dropped = self._pending.pop(key, None)
            if dropped is not None:
                self.own_writes.cancel(_ref(dropped), dropped.mark)  # never sent
            if key in self._inflight:  # it records nothing and is not retried
                self._superseded.add(key)
                self._gone.add(key)
            self._refused.pop(key, None)
            QUEUED.set(len(self._pending))

    def has_finalizer(self, raw: JSON) -> bool:
        """Is our finalizer on ``raw``, added by us, or on its way?"""
        meta = raw.get("metadata") or {}
        if CHILDREN_FINALIZER in (meta.get("finalizers") or ()):
            return True
        key, uid = object_key(raw), meta.get("uid")
        with self._cv:
            want = self._pending.get(key)
            return self.own_writes.finalizer_added(uid or "") or (
                want is not None and want.uid == uid and want.finalizer)

    def refused(self, raw: JSON) -> bool:
        """Was the last write of ``raw`` (this UID) refused for good, and none landed
        since? Then a reconcile that writes its status again is owed by that refusal."""
        with self._cv:
            return self._refused.get(object_key(raw)) == (raw.get("metadata") or {}).get("uid")

    def queued(self) -> int:
        with self._cv:
            return len(self._pending) + len(self._inflight)

    def flush(self, timeout: float = 30.0) -> bool:
        """Waits until nothing is queued or in flight (tests, shutdown)."""
        deadline = self.clock() + timeout
        with self._cv:
            while self._pending or self._inflight or self._reporting:
                if self.clock() > deadline:
                    return False
                self._cv.wait(0.05)
        return True

    # ------------------------------------------------------------------ runnable

    def start(self) -> None:
        if self.pacer is not None:
            self.pacer.drain(False)
        with self._cv:
            self._stop = False
        for i in range(self.threads):
            t = threading.Thread(target=self._run, name=f"status-writer-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def stop(self, timeout: float = 10.0) -> bool:
        """Writes what is queued (up to ``timeout``, held or not), then stops."""
        if self.pacer is not None:
            self.pacer.drain()
            with self._cv:  # what was held is due now
                self._order.extend(key for _, _, key in sorted(self._later))
                self._later.clear()
                self._cv.notify_all()
        drained = self.flush(timeout)
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        for t in self._workers:
            t.join(1.0)
        self._workers = []
        return drained

    # ------------------------------------------------------------------ writer side

    def _next(self) -> tuple[str, _Want] | None:
        """The next write to send. ``_order`` holds the keys ready to go, in the
        order they became ready; ``_later`` (a heap) those held or backing off,
        until their time: no scan of the whole queue per write."""
        with self._cv:
            while True:
                if self._stop:
                    return None
                now = self.clock()
                while self._later and self._later[0][0] <= now:
                    self._order.append(heapq.heappop(self._later)[2])
                wait = min(0.5, self._later[0][0] - now) if self._later else 0.5
                while self._order:
                    key = self._order[0]
                    want = self._pending.get(key)
                    if want is None or key in self._inflight:
                        self._order.popleft()  # settled, forgotten, taken, or a duplicate
                        continue
                    ready = max(want.not_before, self._ready_at(key, want, now))
                    if ready > now:
                        self._order.popleft()
                        heapq.heappush(self._later, (ready, next(self._seq), key))
                        wait = min(wait, ready - now)
                        continue
                    if self.pacer is not None and (later := self.pacer.admit(ready, now)):
                        wait = min(wait, later)  # no token: the oldest keeps its turn
                        break
                    self._order.popleft()
                    del self._pending[key]
                    self._inflight.add(key)
                    QUEUED.set(len(self._pending))
                    return key, want
                self._cv.wait(wait)

    def _ready_at(self, key: str, want: _Want, now: float) -> float:
        if self.pacer is None:
            return want.since
        first_finalizer = want.finalizer and not self.own_writes.finalizer_added(want.uid)
        return self.pacer.ready_at(want.status, want.since, first_finalizer, now)

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            key, want = item
            ok: bool | None = False
            refusal = None
            try:
                ok = self._write(key, want)
            except Exception as exc:  # retried below (nothing is lost), unless for good
                refusal = refusals.for_good(exc)
                if refusal is None:
                    WRITES.labels("error").inc()
                    log.warning("status.write_failed", workload=key, error=str(exc),
                                failures=want.failures + 1)
            with self._cv:
                self._inflight.discard(key)
                if refusal is not None and key not in self._superseded:
                    # sent again, it would get the same answer: dropped, its mark goes
                    self.own_writes.cancel(_ref(want), want.mark)
                    self._refused[key] = want.uid
                    ok = True
                else:
                    refusal = None  # settled or forgotten meanwhile: nothing to report
                    if ok:
                        self._refused.pop(key, None)
                if key in self._superseded:
                    if not ok:  # it never landed and never will: its mark goes
                        self.own_writes.cancel(_ref(want), want.mark)
                    ok = True  # settled or forgotten meanwhile: not retried
                self._superseded.discard(key)
                self._gone.discard(key)
                if ok is HELD and key not in self._pending:
                    self._pending[key] = want  # the finalizer is on; the status waits
                    self._order.append(key)
                elif ok is HELD:
                    COALESCED.inc()  # a newer status, submitted meanwhile, replaces it
                    self._order.append(key)
                elif not ok and key not in self._pending:
                    want.failures += 1
                    want.not_before = self.clock() + min(RETRY_MAX,
                                                         RETRY_BASE * 2 ** (want.failures - 1))
                    self._pending[key] = want
                    self._order.append(key)
                elif key in self._pending:
                    self._order.append(key)  # a newer one arrived while writing
                QUEUED.set(len(self._pending))
                self._reporting += refusal is not None  # flush waits for the report
                self._cv.notify_all()
            if refusal is not None:
                try:
                    cached = self.workloads.get_by_name(want.name, want.namespace)
                    same = cached is not None and cached["metadata"].get("uid") == want.uid
                    refusals.report(self.recorder, cached if same else _ref(want), refusal)
                finally:
                    with self._cv:
                        self._reporting -= 1
                        self._cv.notify_all()

    def _write(self, key: str, want: _Want) -> bool | None:
        """True when done (written, or nothing left to write); ``HELD``: the
        finalizer was added and the status itself still waits its lag."""
        cached = self.workloads.get_by_name(want.name, want.namespace)
        if cached is not None and (cached.get("metadata") or {}).get("uid") != want.uid:
            WRITES.labels("gone").inc()
            self.own_writes.forget(want.uid)  # ours is gone: another object has the name
            return True
        finalized = self.own_writes.finalizer_added(want.uid)
        if want.finalizer and not finalized and cached is not None \
                and not self._add_finalizer(cached):
            return False
        if want.finalizer and self.pacer is not None and \
                self.pacer.ready_at(want.status, want.since, False) > self.clock():
            return HELD  # the finalizer could not wait; the status can
        try:
            written = patch_status(self.client, want.namespace, want.name, want.uid,
                                   want.status)
        except NotFound:
            written = None
        if written is None:  # gone, or another object of that name now
            WRITES.labels("gone").inc()
            self.own_writes.forget(want.uid)
            return True
        WRITES.labels("written").inc()
        LAG.observe(max(0.0, self.clock() - want.since))
        self.own_writes.wrote(written, want.mark)
        return True

    def _add_finalizer(self, obj: JSON) -> bool:
        """Adds our finalizer (``patches.add_finalizer``) and remembers it,
        unless the workload was forgotten meanwhile. False: try again."""
        landed: list[int] = []
        # on its way until it landed: the watch may bring it first (``OwnEchoes``)
        with self.own_writes.finalizing(obj):
            if not add_finalizer(self.client, obj, landed=landed):
                return False
            key = object_key(obj)
            with self._cv:
                if key not in self._gone:  # forgotten meanwhile: nothing of it is kept
                    self.own_writes.finalized(obj, landed[0] if landed else 0)
        return True


def _ref(want: _Want) -> JSON:
    """The object a queued write is for, as ``OwnWrites`` keys it (its UID)."""
    return {"metadata": {"uid": want.uid, "namespace": want.namespace, "name": want.name}}
