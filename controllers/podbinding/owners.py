"""The owners a pod group's size is read from (``internal/scheduling/podgroups.py``):
Jobs always, JobSets and LeaderWorkerSets once the API server serves them, each
through an informer's cache (no request per reconcile).

A peer's API served when the manager starts is watched from the start: its informer
syncs with the others before the controllers start. One that is not (JobSet
installed after gpu-orchestrator; kube-apiserver's discovery answering 404 for the
CRD just after it restarted) is looked for again while the manager runs, as Kueue
waits for an integration's CRD:

=========================================  ===========================================
when                                       what :class:`OwnerCaches` does
=========================================  ===========================================
every ``DISCOVERY_PERIOD`` s (30)          asks discovery for each kind not watched
a lookup of a kind not watched (a pod of   the same, at once, but not sooner than
that owner refused as unreadable)          ``MIN_RECHECK`` s (5) after the last ask
discovery says the kind is served          starts its informer (the manager's shared
                                           one) and, once it synced, looks owners up
                                           in it, logs ``podgroups.owner_served`` and
                                           re-queues the pods of that owner
                                           (``when_served``, ``requeue_members``)
discovery answers 404, or fails otherwise  nothing: asked again later (never an
(unreachable, 5xx, 429)                    informer of a kind that may not be served:
                                           it would never sync)
=========================================  ===========================================

Until its owner kind is watched, a JobSet pod's group is refused as unreadable
(``PodGroupSizeUnreadable``, naming the JobSet) and a LeaderWorkerSet pod's group is
formed without its ``startupPolicy``; both are read again when it is. Its informer,
added after the manager's start, counts in the manager's ``informers-synced``
readiness check until it synced (a list, usually well under a second).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import structlog

from internal.objects import JSON
from internal.scheduling.podgroups import (
    JOBSET_API,
    JOBSET_NAME_LABEL,
    LWS_API,
    LWS_NAME_LABEL,
)
from runtime import Manager, NotFound, Request, SharedIndexInformer
from runtime.errors import ApiError
from runtime.store import Indexer

log = structlog.get_logger("podbinding")

#: (apiVersion, kind) of the owners a group's size may be read from
OWNERS = (("batch/v1", "Job"), (JOBSET_API, "JobSet"), (LWS_API, "LeaderWorkerSet"))
#: the label that names the owner on its pods, of the kinds that may be served late
POD_LABELS = {"JobSet": JOBSET_NAME_LABEL, "LeaderWorkerSet": LWS_NAME_LABEL}
#: seconds between two looks at discovery while a kind is not watched
DISCOVERY_PERIOD = 30.0
#: the fewest seconds between two looks that a lookup asks for
MIN_RECHECK = 5.0
#: how often a started informer is looked at until it synced
SYNC_POLL = 0.2

#: told (apiVersion, kind) once a kind not served at the start is watched and synced
ServedHook = Callable[[str, str], None]


def served(client: Any, api_version: str, kind: str) -> bool | None:
    """Does the API server serve ``kind``? True, False (404), or None when discovery
    failed otherwise (logged)."""
    try:
        client.resource_for(api_version, kind)
    except NotFound:
        return False
    except ApiError as exc:
        log.warning("podgroups.discovery.failed", kind=kind, code=exc.status, error=str(exc))
        return None
    return True


class OwnerCaches:
    """An ``OwnerLookup`` on the owners' informer caches, which watches the kinds
    not served at its setup once they are (the module's table). Thread-safe; a
    runnable of the manager (started before the caches, without leader election,
    stopped before them)."""

    def __init__(self, mgr: Manager, period: float = DISCOVERY_PERIOD,
                 min_recheck: float = MIN_RECHECK,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._mgr, self.period, self.min_recheck, self._clock = mgr, period, min_recheck, clock
        self._caches: dict[tuple[str, str], Indexer] = {}
        #: kinds not watched yet -> their informer once started, until it synced
        self._missing: dict[tuple[str, str], SharedIndexInformer | None] = {}
        self._hooks: list[ServedHook] = []
        self._lock = threading.Lock()
        self._poked = threading.Event()
        self._stopped = threading.Event()
        self._last_look = clock()  # the look below, at setup
        self._thread: threading.Thread | None = None
        for api_version, kind in OWNERS:
            # at setup an error other than 404 says served: the informer retries,
            # and the manager waits for it as for every other informer
            if api_version == "batch/v1" or served(mgr.client, api_version, kind) is not False:
                self._caches[(api_version, kind)] = mgr.informer_for(api_version, kind).indexer
                continue
            log.info("podgroups.owner_not_served", kind=kind, api_version=api_version,
                     effect=f"the groups of {kind} pods are refused as unreadable until "
                            f"{kind} is served (looked for every {self.period:.0f} s)")
            self._missing[(api_version, kind)] = None

    def __call__(self, api_version: str, kind: str, namespace: str, name: str) -> JSON | None:
        cache = self._caches.get((api_version, kind))
        if cache is None:
            self._poked.set()  # looked at soon (``until_due``), not here: no I/O here
            return None
        return cache.get_by_name(name, namespace)

    def when_served(self, hook: ServedHook) -> None:
        """``hook`` is told each kind watched after the start, once its cache synced."""
        with self._lock:
            self._hooks.append(hook)

    def watched(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) in self._caches

    # ------------------------------------------------------------- the looks
    def until_due(self, now: float) -> float:
        """Seconds until a look at discovery is due (0: now): ``period`` after the
        last, ``min_recheck`` after it once a lookup missed."""
        limit = min(self.period, self.min_recheck) if self._poked.is_set() else self.period
        return max(0.0, limit - (now - self._last_look))

    def look(self) -> None:
        """Ask discovery for each kind not watched; start the informer of each served
        one (the manager's factory starts it, as it was started already)."""
        self._last_look = self._clock()
        self._poked.clear()
        for (api_version, kind), informer in list(self._missing.items()):
            if informer is not None or served(self._mgr.client, api_version, kind) is not True:
                continue
            with self._lock:
                if self._stopped.is_set():
                    return
                self._missing[(api_version, kind)] = self._mgr.informer_for(api_version, kind)
            log.info("podgroups.owner_discovered", kind=kind, api_version=api_version)

    def promote_synced(self) -> list[tuple[str, str]]:
        """Look owners up in each started informer that synced; tell the hooks."""
        done = [k for k, inf in self._missing.items() if inf is not None and inf.has_synced()]
        for api_version, kind in done:
            informer = self._missing.pop((api_version, kind))
            assert informer is not None
            self._caches[(api_version, kind)] = informer.indexer
            log.info("podgroups.owner_served", kind=kind, api_version=api_version,
                     effect=f"{kind} pods' groups are read from its cache from now on; "
                            f"its pods are looked at again")
            with self._lock:
                hooks = list(self._hooks)
            for hook in hooks:
                try:
                    hook(api_version, kind)
                except Exception:  # one hook's failure leaves the others told
                    log.exception("podgroups.owner_served_hook_failed", kind=kind)
        return done

    # ------------------------------------------------------------- runnable
    def start(self) -> None:
        if self._missing and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="podgroup-owners",
                                            daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._stopped.set()
        self._poked.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while self._missing and not self._stopped.is_set():
            starting = any(inf is not None for inf in self._missing.values())
            wait = self.until_due(self._clock())
            if starting or self._poked.is_set():
                # an informer to see synced, or a look asked for: sleep until then
                if self._stopped.wait(min(wait, SYNC_POLL) if starting else wait):
                    return
            elif wait > 0:
                self._poked.wait(wait)  # a lookup's miss (or stop) wakes it early
                continue
            try:
                if self.until_due(self._clock()) <= 0:
                    self.look()
                self.promote_synced()
            except Exception:  # never ends the looks: logged, tried at the next one
                log.exception("podgroups.owner_look_failed")


def requeue_members(pods: Indexer, owns: Callable[[JSON], bool],
                    enqueue: Callable[[Request], None]) -> ServedHook:
    """A ``when_served`` hook: every pod of ours that names an owner of that kind is
    reconciled again (those refused as unreadable among them)."""
    def hook(api_version: str, kind: str) -> None:
        label = POD_LABELS.get(kind)
        if label is None:
            return
        for pod in pods.list():
            meta = pod.get("metadata") or {}
            if label in (meta.get("labels") or {}) and owns(pod):
                enqueue(Request(meta.get("namespace") or "default", meta["name"]))
    return hook


_BY_MANAGER: weakref.WeakKeyDictionary[Manager, OwnerCaches] = weakref.WeakKeyDictionary()
_BY_MANAGER_LOCK = threading.Lock()


def owner_lookup(mgr: Manager) -> OwnerCaches:
    """The manager's one :class:`OwnerCaches` (made, and added to the manager, at
    the first call; call before the manager starts)."""
    with _BY_MANAGER_LOCK:
        caches = _BY_MANAGER.get(mgr)
        if caches is None:
            caches = _BY_MANAGER[mgr] = OwnerCaches(mgr)
            mgr.add(caches, need_leader_election=False)
        return caches
